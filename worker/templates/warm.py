"""Build sandboxes made, and some kept warm ahead of the builds that will take them (25).

A build sandbox costs ~0.4-0.6 s before a step can run (runsc creates and boots
the sandbox, PID 1's relay comes up): ``BuildSandboxes`` makes them, and keeps
one warm per recent kind (base image id, the build's CPU and memory quotas, with
or without network), made off the builds' path: at the node's start for the bases
``SANDGRID_TEMPLATES__WARM_BASES`` names, and after a build for the kind it used.

A warm sandbox is the one a cold build would get, made earlier: the same
container (gVisor, no network, the quotas), its egress socket open but bound to
no session (the proxy refuses every connection until ``bind``), no step run in
it, nothing written. A build takes it for itself alone (``take``); it is removed
after that build like any build sandbox, whatever the build's outcome, and
never handed to a second one.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from sandgrid.templates import BuildQuotas
from worker.egress.proxy import EgressProxy
from worker.templates.sandbox import BuildSandbox

__all__ = ["BUILD_LABEL", "NODE_LABEL", "WARM", "BuildSandboxes", "WarmKey"]

log = logging.getLogger(__name__)

#: The label every build sandbox carries: the build's id, or ``warm`` when made ahead.
BUILD_LABEL = "sandgrid.build"
NODE_LABEL = "sandgrid.build-node"
WARM = "warm"


@dataclass(frozen=True)
class WarmKey:
    """What makes a warm sandbox fit a build: the base's image id, its quotas, network."""

    image_id: str
    cpus: float
    memory_mb: int
    network: bool


class BuildSandboxes:
    """This node's build sandboxes: made cold for a build, or ahead and kept warm.

    Args:
        client: the Docker SDK client of the node's engine.
        node: this node's name (the sandboxes' label).
        egress: the node's egress proxy (None: no build has network).
        egress_port: the in-sandbox relay's loopback port.
        keep: at most this many warm sandboxes (kinds) at once (0: none).
    """

    def __init__(
        self, client: Any, node: str, *, egress: EgressProxy | None, egress_port: int, keep: int
    ) -> None:
        self.client = client
        self.node = node
        self.egress = egress
        self.egress_port = egress_port
        self.keep = keep
        self._lock = threading.Lock()
        self._warm: dict[WarmKey, BuildSandbox] = {}  # in the order made: the oldest goes first
        self._making: set[WarmKey] = set()
        self._closed = False

    def make(self, image: str, quotas: BuildQuotas, network: bool, label: str) -> BuildSandbox:
        """Create one (not started): its egress directory mounted and its socket open, bound
        to no session yet."""
        name = f"sandgrid-build-{label if label != WARM else WARM + '-' + secrets.token_hex(6)}"
        egress_dir = None
        if network and self.egress is not None:
            egress_dir = self.egress.directory(name)
        try:
            sandbox = BuildSandbox(
                self.client,
                name,
                image,
                quotas,
                egress_dir=egress_dir,
                egress_port=self.egress_port,
                labels={BUILD_LABEL: label, NODE_LABEL: self.node},
            )
        except BaseException:
            self._close_egress(name, None)
            raise
        if egress_dir is not None and self.egress is not None:
            try:
                self.egress.open(name, lambda: sandbox.session)
            except BaseException:
                self.remove(sandbox)
                raise
        return sandbox

    def take(self, key: WarmKey, build_id: str) -> BuildSandbox | None:
        """The warm sandbox of ``key`` for build ``build_id`` alone (renamed after it), or
        None. It is no longer warm: nothing else gets it."""
        with self._lock:
            sandbox = self._warm.pop(key, None)
        if sandbox is None:
            return None
        try:
            sandbox.container.rename(f"sandgrid-build-{build_id}")
        except Exception as exc:  # a name is for people: the build goes on under the warm one
            log.warning("template build %s: rename: %s", build_id, type(exc).__name__)
        return sandbox

    def warm(self, key: WarmKey, image: str) -> None:
        """Make a warm sandbox of ``key`` unless one is there or being made (a thread's
        whole job: it waits for the sandbox's start and relay). Over ``keep`` kinds, the
        oldest warm sandbox is removed."""
        with self._lock:
            if self._closed or self.keep <= 0 or key in self._warm or key in self._making:
                return
            self._making.add(key)
        sandbox: BuildSandbox | None = None
        try:
            quotas = BuildQuotas(cpus=key.cpus, memory_mb=key.memory_mb)
            sandbox = self.make(image, quotas, key.network, WARM)
            refused = sandbox.start()
            if refused is None:
                sandbox.await_relay()
        except Exception as exc:
            log.warning("warm build sandbox: %s", type(exc).__name__)
            refused = "failed"
        evicted: list[BuildSandbox] = []
        with self._lock:
            self._making.discard(key)
            if sandbox is not None and refused is None and not self._closed:
                self._warm[key] = sandbox
                sandbox = None
                while len(self._warm) > self.keep:
                    evicted.append(self._warm.pop(next(iter(self._warm))))
        for gone in [*evicted, *([sandbox] if sandbox is not None else [])]:
            self.remove(gone)

    def remove(self, sandbox: BuildSandbox) -> None:
        """Remove a sandbox and close its egress socket (its booking is the builder's)."""
        sandbox.remove()
        self._close_egress(sandbox.name, sandbox.session)

    def _close_egress(self, name: str, session: str | None) -> None:
        if self.egress is not None:
            self.egress.close(name, session)

    def collect(self) -> None:
        """Remove the build sandboxes an earlier process of this node left (at its start)."""
        with contextlib.suppress(Exception):  # the engine's error: the next start collects
            for c in self.client.containers.list(
                all=True, filters={"label": f"{NODE_LABEL}={self.node}"}
            ):
                with contextlib.suppress(Exception):
                    c.remove(force=True)

    def close(self) -> None:
        """Remove every warm sandbox; none is made after (the node stops)."""
        with self._lock:
            self._closed = True
            warm, self._warm = list(self._warm.values()), {}
        for sandbox in warm:
            self.remove(sandbox)
