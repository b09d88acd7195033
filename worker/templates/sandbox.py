"""The build sandbox: a gVisor container of the base image, its steps run as root in it (25.2).

What it gets, and why:

- runsc, always: the steps are the tenant's code, as root; only gVisor's
  kernel stands between them and the host. Its runtime is ``runsc-build``
  (``BUILD_RUNTIME``, registered by ``deploy/local/docker.sh``): runsc with
  ``--overlay2=root:memory``.
- ``network_mode="none"``: a loopback interface and nothing else. Its only
  way out is the node's egress proxy, as for a session: the proxy's Unix
  socket is mounted, PID 1 (Python, the agent's own relay) forwards
  ``127.0.0.1:<port>`` to it, and the proxy applies the build's policy
  (booked under a pseudo-session) and refuses the grid's own services.
- The build's CPU, memory and pid limits on the container; its time quota
  held by the host, which kills the container at the deadline.
- A writable root filesystem (steps install packages), its overlay in the
  sandbox's memory, so the memory limit also bounds what steps write. runsc's
  default (``root:self``) keeps the overlay in a file on the host's disk,
  which nothing bounds: a node whose engine lacks the runtime refuses builds.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandgrid.templates import MAX_LOG_BYTES, BuildQuotas
from worker.agent_client.bundle import AGENT_MOUNT, agent_path
from worker.egress.env import MOUNT as EGRESS_MOUNT
from worker.egress.env import proxy_env
from worker.templates.errors import BuildFailed

__all__ = [
    "BUILD_RUNTIME",
    "NO_BUILD_RUNTIME",
    "NO_PYTHON",
    "BuildSandbox",
    "Log",
    "SandboxEnded",
    "StepRun",
]

#: The engine's runtime for build sandboxes: runsc, the root's overlay in memory.
BUILD_RUNTIME = "runsc-build"
NO_BUILD_RUNTIME = (
    f"this node's engine has no runtime {BUILD_RUNTIME!r} (gVisor with the root's overlay in "
    "memory, registered by deploy/local/docker.sh): without it a build's writes would not be "
    "bounded by its memory quota"
)

NO_PYTHON = (
    "the base image has no python3: the in-sandbox agent needs python3, "
    "build from a base that has it"
)
#: PID 1: the agent's egress relay (its loopback port to the proxy's socket), then sleep.
_RELAY = (
    "import sys, time; sys.path.insert(0, sys.argv[1]); "
    "from sandgrid_agent.egress import start_egress; start_egress(); "
    "print('sandgrid-relay-listening', flush=True); time.sleep(1e9)"
)
_LISTENING = b"sandgrid-relay-listening"
_RELAY_WAIT_S = 60.0
_WRITE = (
    "import base64, json, os, sys\n"
    "for path, data in json.loads(base64.b64decode(sys.argv[1])).items():\n"
    "    os.makedirs(os.path.dirname(path) or '/', exist_ok=True)\n"
    "    with open(path, 'wb') as f: f.write(base64.b64decode(data))\n"
)
Log = Callable[[str], None]


class SandboxEnded(Exception):
    """PID 1 of the build sandbox ended before the steps did: the reason, for the record."""


@dataclass(frozen=True)
class StepRun:
    """How one step ended: its exit code, and whether the build's deadline cut it."""

    exit_code: int
    timed_out: bool


class BuildSandbox:
    """One build's container: created and started (maybe ahead, warm: ``warm.py``), then
    bound to one build (``bind``), stepped through, and removed by the builder.

    Args:
        client: the Docker SDK client of the node's engine.
        name: the container's name.
        image: the base image.
        quotas: the build's limits.
        egress_dir: the sandbox's egress directory on the host (None: no network).
        egress_port: the loopback port of the in-sandbox relay.
        labels: the container's labels.
    """

    def __init__(
        self,
        client: Any,
        name: str,
        image: str,
        quotas: BuildQuotas,
        *,
        egress_dir: Any,
        egress_port: int,
        labels: dict[str, str],
    ) -> None:
        self.client = client
        self.name = name
        #: The pseudo-session the egress proxy books its connections under (None: refused).
        self.session: str | None = None
        self.env: dict[str, str] = {"HOME": "/root"}
        if egress_dir is not None:
            self.env.update(proxy_env(egress_port), PIP_NO_INDEX="0")
        self.workdir = "/"
        self._killed = threading.Event()
        self._execs = 0
        self._stream: Any = None  # the running step's exec output (CancellableStream)
        self._listening = egress_dir is None  # no network: no relay to wait for
        mounts = [f"{agent_path()}:{AGENT_MOUNT}:ro"]
        if egress_dir is not None:
            mounts.append(f"{egress_dir}:{EGRESS_MOUNT}:ro")
        import docker.errors

        try:
            self.container = client.containers.create(
                image,
                ["python3", "-I", "-c", _RELAY, AGENT_MOUNT],
                name=name,
                runtime=BUILD_RUNTIME,
                network_mode="none",
                user="0:0",
                labels=labels,
                environment={"SANDGRID_EGRESS_PORT": str(egress_port)},
                volumes=mounts,
                nano_cpus=int(quotas.cpus * 1e9),
                mem_limit=f"{quotas.memory_mb + 256}m",  # the sentry's own memory beside the steps'
                pids_limit=4096,
                security_opt=["no-new-privileges"],
                detach=True,
            )
        except docker.errors.APIError as exc:
            if BUILD_RUNTIME in str(exc):  # an engine without it: refused, never unbounded
                raise BuildFailed(NO_BUILD_RUNTIME) from None
            raise
        self._timer: threading.Timer | None = None

    def start(self) -> str | None:
        """Start PID 1; the reason it cannot run (no python3), or None.

        No separate python3 check: PID 1 is python3, so a base without it fails
        the start itself ("error finding executable "python3"" under runsc), and
        one whose python3 cannot run the relay has ended by the first exec
        (``SandboxEnded``, from ``run`` or ``ended``). With network, the first
        step waits for PID 1's word that the relay listens (its first line).
        """
        import docker.errors

        try:
            self.container.start()
        except docker.errors.APIError as exc:
            return NO_PYTHON if "python3" in str(exc) else f"the build sandbox did not start: {exc}"
        return None

    def bind(self, session: str, deadline: float) -> None:
        """Book the sandbox for one build: its egress pseudo-session, and the host's kill at
        the build's ``deadline`` (``time.time()``)."""
        self.session = session
        self._timer = threading.Timer(max(0.0, deadline - time.time()), self._kill)
        self._timer.daemon = True
        self._timer.start()

    def ended(self) -> str | None:
        """Why PID 1 is no longer running (python3 could not run the agent's relay), or None."""
        try:
            self.container.reload()
            state = self.container.attrs.get("State") or {}
        except Exception:
            return None  # gone: the deadline's kill, or the engine; the caller's error stands
        if state.get("Running"):
            return None
        code, oom = state.get("ExitCode"), " (out of memory)" if state.get("OOMKilled") else ""
        if self._execs == 0 and not oom:
            return f"{NO_PYTHON} (its python3 ended at the start with {code})"
        return f"the build sandbox ended during the steps with {code}{oom}"

    def run(self, command: list[str], log: Log) -> StepRun:
        """Run ``command`` as root in the sandbox, its output to ``log``, until its end
        or the deadline."""
        import docker.errors

        self.await_relay()
        if self._killed.is_set():
            return StepRun(-9, True)
        api = self.client.api
        try:
            made = api.exec_create(
                self.container.id, command, user="0:0", environment=self.env, workdir=self.workdir
            )
        except docker.errors.APIError:
            if self._killed.is_set():
                return StepRun(-9, True)
            why = self.ended()
            if why is not None:
                raise SandboxEnded(why) from None
            raise
        self._execs += 1
        self._stream = api.exec_start(made["Id"], stream=True)
        try:
            for chunk in self._stream:
                log(chunk[-MAX_LOG_BYTES:].decode("utf-8", "replace"))
                if self._killed.is_set():
                    break
        except Exception:
            if not self._killed.is_set():
                raise  # the deadline's close of the stream may raise as it ends it
        if self._killed.is_set():
            return StepRun(-9, True)
        code = api.exec_inspect(made["Id"])["ExitCode"]
        return StepRun(int(code if code is not None else -1), self._killed.is_set())

    def await_relay(self) -> None:
        """Until PID 1 says its relay listens: a step's first connection must find it there
        (at once without network, or once it has said so).

        Raises:
            SandboxEnded: PID 1 ended (or was silent for a minute) without saying so.
        """
        if self._listening or self._killed.is_set():
            return
        self._stream = self.container.logs(stream=True, follow=True, stdout=True, stderr=False)
        silent = threading.Timer(_RELAY_WAIT_S, self._stream.close)
        silent.start()
        seen = b""
        try:
            for chunk in self._stream:
                seen = (seen + chunk)[-256:]
                if _LISTENING in seen:
                    self._listening = True
                    break
        except Exception:
            pass  # closed: the deadline, or the minute without a word
        finally:
            silent.cancel()
            with contextlib.suppress(Exception):
                self._stream.close()
        if not self._listening and not self._killed.is_set():
            raise SandboxEnded(self.ended() or "the build sandbox's egress relay did not start")

    def shell(self, script: str, log: Log) -> StepRun:
        return self.run(["sh", "-c", script], log)

    def write(self, files: dict[str, str], log: Log) -> StepRun:
        """Write ``files`` (path -> text) as root, by a Python one-liner (no engine copy:
        gVisor's root filesystem is in the sandbox, not on the host)."""
        payload = {p: base64.b64encode(c.encode()).decode() for p, c in files.items()}
        arg = base64.b64encode(json.dumps(payload).encode()).decode()
        return self.run(["python3", "-I", "-c", _WRITE, arg], log)

    def _kill(self) -> None:
        """The deadline: end the step's exec stream, kill and remove the container. Under
        runsc a killed sandbox's exec attach could stay open, and the build then hung past
        its deadline with its container left behind: the stream is closed from here
        (``CancellableStream.close``), before the kill, which could be slow as well."""
        self._killed.set()
        with contextlib.suppress(Exception):  # no step running, or closed already
            self._stream.close()
        with contextlib.suppress(Exception):  # gone already: nothing to do
            self.container.kill()
        with contextlib.suppress(Exception):
            self.container.remove(force=True)

    def stop(self) -> None:
        """Stop the deadline timer (the container stays for the commit)."""
        if self._timer is not None:
            self._timer.cancel()

    def remove(self) -> None:
        self.stop()
        with contextlib.suppress(Exception):  # gone already: nothing to do
            self.container.remove(force=True)
