"""The sandboxes of one runtime: the runtime-neutral algorithm over a ``Runtime``.

``SandboxManager`` does everything that must be the same for every runtime:
validating input, building the sandbox's spec (limits, labels, mounts: a
neutral ``SandboxSpec``), opening the agent client and checking it answers,
state changes, the kill that holds a missed deadline, and ``call``, the one
agent request that the op handlers (``worker.ops``) make theirs over (a broken
channel marks the sandbox ``lost``). It holds one ``Runtime`` (``engine``: Docker with
runc, with runsc, ...) for the seven primitives that differ: create, attach,
start, remove, kill, inspect, list. The snapshot operations are its ``files``
(``AgentFiles``, composed over ``call``); a sandbox's handle (``Sandbox``) holds
its ``AgentClient``.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sandgrid.errors import CapacityError, InvalidInput, SandboxError, SandboxLost
from sandgrid.models import Quotas
from sandgrid.wire.settings import get_settings
from worker.agent_client.client import AgentClient, ChunkCallback
from worker.egress.proxy import EgressProxy
from worker.ports.sockets import InboundSockets
from worker.quotas import sandbox_labels, sandbox_spec
from worker.runtimes.base import Runtime
from worker.runtimes.spec import SandboxSpec
from worker.sandboxes.files import AgentFiles
from worker.sandboxes.handle import USABLE, Sandbox

__all__ = [
    "DEADLINE_MARGIN_S",
    "FILE_OP_TIMEOUT_S",
    "INCARNATION",
    "PING_TIMEOUT_S",
    "START_TIMEOUT_S",
    "SandboxManager",
]

log = logging.getLogger(__name__)

DEADLINE_MARGIN_S = 0.9
"""How long past an exec's deadline the worker waits for the agent's answer.

The agent kills what the command started and answers within this margin. When
it does not (a sandbox starved by its own fork bomb under gVisor, say), the
worker holds the deadline itself: it kills the container's top process from
the host (``hostkill``), which ends every process in it, and answers
``timed_out``; the session continues from its last snapshot in a fresh
container."""
FILE_OP_TIMEOUT_S = 60.0
START_TIMEOUT_S = 30.0
PING_TIMEOUT_S = 5.0
INCARNATION = uuid.uuid4().hex[:12]
"""This worker process: labels its containers so a successor can spot orphans."""
_RLIMIT_REFUSED = re.compile(r"error setting rlimit type (\d+)")
"""The OCI runtime's words when the host cannot give a sandbox a ulimit it asked for."""
_RLIMIT_FIELDS = {"1": "quotas.fsize_mb", "7": "quotas.nofile"}  # RLIMIT_FSIZE, RLIMIT_NOFILE

_TYPE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


class SandboxManager:
    """Create, call and destroy the sandboxes of one runtime.

    Args:
        runtime: what makes the sandboxes (``worker.runtimes.runtime_for``).
        node: this worker's name (``sandgrid.worker`` label); default from settings.
        image_prefix: sandbox images are ``<prefix><type>:latest``.
        network_types: sandbox types allowed to have a network.
        network: the network those types join.
        egress: the node's egress proxy; every sandbox gets a socket of it
            (None: sandboxes have no egress relay at all).
        inbound: the node's port listeners (issue 21.1): every sandbox gets one in
            its egress directory (None, or no egress: no exposed ports).
        images: the node's image check (25.3, ``worker.images.ImagePuller.ensure``):
            given the type's image and digest (None: by tag), the local reference
            to create from, pulling it from the grid's registry when absent (None:
            local images only). A callable, so this runtime-neutral side names no
            engine.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        node: str | None = None,
        image_prefix: str | None = None,
        network_types: frozenset[str] = frozenset(),
        network: str = "bridge",
        egress: EgressProxy | None = None,
        inbound: InboundSockets | None = None,
        images: Callable[[str, str | None], str] | None = None,
    ) -> None:
        settings = get_settings()
        self.engine = runtime
        #: The runtime's name: on every ``Sandbox`` it makes, in its errors.
        self.runtime = runtime.name
        #: The snapshot operations on its sandboxes (``SandboxFiles``).
        self.files = AgentFiles(self)
        self.egress = egress
        self.inbound = inbound if egress is not None else None
        self.egress_port = settings.worker.egress.port
        self.node = node or settings.worker.node or socket.gethostname()
        self.image_prefix = image_prefix or settings.image_prefix
        self.network_types = network_types
        self.network = network
        self.images = images

    # ---- life cycle ----------------------------------------------------------

    def image_for(self, sandbox_type: str) -> str:
        """The catalog's image for a known type, else ``<prefix><type>:latest``."""
        from sandgrid.wire.catalog import current

        known = current().get(sandbox_type)
        return known.image if known else f"{self.image_prefix}{sandbox_type}:latest"

    def create(
        self,
        sandbox_type: str,
        quotas: Quotas | None = None,
        labels: dict[str, str] | None = None,
        *,
        session_id: str | None = None,
        tenant: str | None = None,
        restore_image: Path | None = None,
        engine_network: bool = False,
        before_start: Callable[[], object] | None = None,
    ) -> Sandbox:
        """Create and start a sandbox, and wait until its agent answers.

        Args:
            sandbox_type: the type name (selects the image).
            quotas: its limits; the defaults of ``Quotas`` if omitted.
            labels: extra container labels (the ``sandgrid.*`` ones are ours).
            session_id: set when the container is made for a known session.
            tenant: likewise.
            restore_image: a memory image to restore instead of booting
                (``Runtime.can_checkpoint``; docs/memory.md): its agent answers
                on the new container's stdio, its processes carry on.
            engine_network: the engine's own empty network for a sandbox with
                none (``SandboxSpec.engine_network``: an image saved before it
                was turned off restores only so).
            before_start: called once the container exists, before it starts: a
                restore waits there for its image, fetched meanwhile (24.4); what
                it raises removes the container and is raised as is.

        Returns:
            A ``warm`` sandbox.

        Raises:
            InvalidInput: bad type name, network not allowed for the type.
            CapacityError: the container could not be created or did not answer.
        """
        quotas = quotas or Quotas.model_validate({})
        all_labels = sandbox_labels(
            node=self.node,
            sandbox_type=sandbox_type,
            incarnation=INCARNATION,
            session_id=session_id,
            tenant=tenant,
            extra=labels,
        )
        spec = replace(
            self._spec(sandbox_type, quotas, all_labels),
            restore_image=restore_image,
            engine_network=engine_network,
        )
        t0 = time.perf_counter()
        cid = self._create_container(spec, sandbox_type)
        sbx = Sandbox(cid, spec.name, sandbox_type, self.runtime, quotas, all_labels)
        sbx.session_id, sbx.tenant = session_id, tenant
        self._open_proxies(sbx)
        sbx.timings["create_ms"] = (time.perf_counter() - t0) * 1000
        if before_start is not None:
            self._before_start(sbx, before_start)
        self._bring_up(sbx)
        return sbx

    def _create_container(self, spec: SandboxSpec, sandbox_type: str) -> str:
        """The container's id; if the engine cannot create it, its sockets are closed."""
        try:
            return self.engine.create(spec)
        except Exception as exc:
            self._close_sockets(spec.name)
            raise CapacityError(
                f"cannot create a {sandbox_type} sandbox ({self.runtime}): {exc}",
                operation="create",
                context={"type": sandbox_type, "runtime": self.runtime},
            ) from exc

    def _open_proxies(self, sbx: Sandbox) -> None:
        """The sandbox's egress proxy and inbound port sockets, if this node has them."""
        if self.egress is not None:
            self.egress.open(sbx.name, lambda: sbx.session_id)
        if self.inbound is not None and self.egress is not None:
            self.inbound.open(sbx.name, self.egress.directory(sbx.name))

    def _before_start(self, sbx: Sandbox, before_start: Callable[[], object]) -> None:
        """Call ``before_start``; what it raises removes the container and is raised as is."""
        try:
            before_start()
        except BaseException:
            sbx.state = "error"
            self.destroy(sbx)
            raise

    def _spec(self, sandbox_type: str, quotas: Quotas, labels: dict[str, str]) -> SandboxSpec:
        """The sandbox's spec, with this runtime's host headroom."""
        name = f"sandgrid-{sandbox_type}-{uuid.uuid4().hex[:12]}"
        egress_dir = self.egress.directory(name) if self.egress is not None else None
        image = self.image_for(sandbox_type)
        if self.images is not None:
            image = self.images(image, None)  # the type's digest once the catalog has it
        return sandbox_spec(
            quotas,
            image=image,
            name=name,
            labels=labels,
            runtime=self.runtime,
            network=self._network_for(sandbox_type, quotas),
            host=self.engine.host_limits(quotas),
            egress_dir=egress_dir,
            egress_port=self.egress_port,
        )

    def _network_for(self, sandbox_type: str, quotas: Quotas) -> str | None:
        if not _TYPE_NAME.match(sandbox_type):
            raise InvalidInput(
                f"sandbox type {sandbox_type!r} must match {_TYPE_NAME.pattern}",
                operation="create",
                context={"field": "type", "value": sandbox_type},
            )
        if not quotas.network:
            return None
        if sandbox_type not in self.network_types:
            raise InvalidInput(
                f"sandbox type {sandbox_type!r} does not allow network access",
                operation="create",
                context={"field": "quotas.network", "type": sandbox_type},
            )
        return self.network

    def _bring_up(self, sbx: Sandbox) -> None:
        """Attach, start, first ping; on any failure the container is removed."""
        try:
            t0 = time.perf_counter()
            sbx.channel = AgentClient(self.engine.attach(sbx.id, sbx.name), sbx.name)
            t1 = time.perf_counter()
            self.engine.start(sbx.id)
            t2 = time.perf_counter()
            sbx.channel.request("ping", timeout=START_TIMEOUT_S)
            t3 = time.perf_counter()
        except Exception as exc:
            sbx.state = "error"
            self.destroy(sbx)
            refused = _RLIMIT_REFUSED.search(str(exc))
            if refused:  # the quota, not the capacity: no other node would do better
                field = _RLIMIT_FIELDS.get(refused.group(1), "quotas")
                raise InvalidInput(
                    f"{field}: above what this host's container runtime may give ({exc})",
                    operation="create",
                    context={"field": field, "rule": "within the host's own hard limit"},
                ) from exc
            raise CapacityError(
                f"sandbox {sbx.name} did not come up ({self.runtime}): {exc}",
                operation="create",
                context={"sandbox": sbx.name, "runtime": self.runtime},
            ) from exc
        sbx.timings.update(
            attach_ms=(t1 - t0) * 1000, start_ms=(t2 - t1) * 1000, ping_ms=(t3 - t2) * 1000
        )

    def destroy(self, sbx: Sandbox, *, remove_later: bool = False) -> None:
        """Close the channel and remove the container. Idempotent; never raises
        for a container that is already gone.

        ``remove_later``: the container's processes are already dead (``Runtime.kill``),
        so it is removed by a background thread and the call returns at once.
        """
        sbx.scan_state = None
        if sbx.channel is not None:
            sbx.channel.close()
        if sbx.state != "destroyed" and remove_later:
            threading.Thread(
                target=self._remove_quietly, args=(sbx.id,), name="sandgrid-remove", daemon=True
            ).start()
        elif sbx.state != "destroyed":
            self.engine.remove(sbx.id)
        sbx.state = "destroyed"
        if self.inbound is not None:
            self.inbound.close(sbx.name)
        if self.egress is not None:
            self.egress.close(sbx.name, sbx.session_id)

    def _close_sockets(self, name: str) -> None:
        """A sandbox that never came to be: its port listener and egress socket go."""
        if self.inbound is not None:
            self.inbound.close(name)
        if self.egress is not None:
            self.egress.close(name)

    def remove_container(self, container_id: str) -> None:
        """Remove a container that no handle holds (the reaper's orphans)."""
        self.engine.remove(container_id)

    def ping(self, sbx: Sandbox, timeout: float = PING_TIMEOUT_S) -> float:
        """Round trip to the agent, in milliseconds (the pool's health check).

        Raises:
            SandboxLost: no answer; the sandbox is now ``lost``.
        """
        t0 = time.perf_counter()
        self.call(sbx, "ping", {}, timeout=timeout)
        return (time.perf_counter() - t0) * 1000

    def warm(self, sbx: Sandbox) -> None:
        """Have a sandbox kept in the pool get ready for its first command ahead
        (the agent answers this ping once its launcher host is ready), and ask
        its host PID now (``host_pid``), off the path of its session's snapshots.

        Raises:
            SandboxLost: no answer; the sandbox is now ``lost``.
        """
        self.call(sbx, "ping", {"warm": True}, timeout=START_TIMEOUT_S)
        self.host_pid(sbx)

    def inspect(self, sbx: Sandbox) -> dict[str, Any]:
        """The container as the runtime sees it, plus the handle's own state."""
        info = self.engine.inspect(sbx.id)
        info.update(sandbox_state=sbx.state, session_id=sbx.session_id, type=sbx.sandbox_type)
        return info

    def host_pid(self, sbx: Sandbox) -> int:
        """The host PID whose root is the sandbox's filesystem (``Runtime.host_pid``),
        asked of the runtime once per sandbox; 0 when there is none."""
        if sbx.host_pid is None:
            try:
                sbx.host_pid = self.engine.host_pid(sbx.id) or 0
            except Exception as exc:  # an optimisation only: the agent packs instead
                log.warning("no host PID for sandbox %s: %s", sbx.name, exc)
                sbx.host_pid = 0
        return sbx.host_pid

    def list_managed(self, node: str | None = None) -> list[dict[str, Any]]:
        """Summaries of every sandgrid container (of ``node`` if given), for the reaper."""
        filters = {"sandgrid.managed": "1"}
        if node is not None:
            filters["sandgrid.worker"] = node
        return self.engine.list_labelled(filters)

    # ---- deadlines ------------------------------------------------------------

    def kill_at_deadline(self, sbx: Sandbox) -> None:
        """The agent missed an exec's deadline: kill the sandbox at once, then destroy it.

        Once its processes are dead the deadline is held, so the container is
        removed in the background (the reaper collects it if the worker dies
        first); if the runtime cannot kill at once, removal is the kill."""
        self.destroy(sbx, remove_later=self.engine.kill(sbx.id))

    # ---- the channel ---------------------------------------------------------

    def call(
        self,
        sbx: Sandbox,
        op: str,
        fields: dict[str, Any],
        *,
        timeout: float = FILE_OP_TIMEOUT_S,
        on_chunk: ChunkCallback | None = None,
    ) -> dict[str, Any]:
        """One agent request on a usable sandbox; a broken channel marks it ``lost``.

        Raises:
            SandboxError: the sandbox is not usable (released, destroyed, lost).
            SandboxLost: the channel broke during this request.
            InvalidInput: the agent refused the input.
        """
        if sbx.state not in USABLE or sbx.channel is None:
            raise SandboxError(
                f"sandbox {sbx.name} is {sbx.state}, not usable",
                operation=op,
                context={"sandbox": sbx.name, "state": sbx.state},
            )
        sbx.scan_ready = None  # any request may change the workspace
        try:
            return sbx.channel.request(op, fields, timeout=timeout, on_chunk=on_chunk)
        except SandboxLost:
            sbx.state, sbx.scan_state = "lost", None
            raise

    def _remove_quietly(self, container_id: str) -> None:
        try:
            self.engine.remove(container_id)
        except Exception:
            log.exception("removing the killed container %s failed", container_id[:12])
