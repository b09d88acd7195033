"""One template's build on a node: steps in a gVisor sandbox, the result an image and a type.

Issue 25, item 2.

The flow (each part in its own module): book the build's egress policy under
its pseudo-session; take a warm build sandbox of the build's kind, or make one
(``warm.py``, ``sandbox.py``: runsc, no network but the proxy's socket, the
build's quotas) and bind it to the build alone; run the steps in order, the log
written into the template's record and appended to the build's event stream
(``build_events``) as it comes; on the first failing step (or the deadline)
stop: the record says which step, its exit code and the log, and nothing is
left (container, image, socket, booking). On success read gVisor's upper layer
(``runsc tar rootfs-upper``) as a Docker layer (``upper.py``, ``layer.py``),
remove the sandbox beside the rest, and commit the layer (``commit.py``: the
size check against ``image_mb``, the push to the grid's registry, the type,
private to the tenant). After a ready build a new warm sandbox of its kind is
made, off the build's path.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.templates import (
    BuildQuotas,
    CopyStep,
    EnvStep,
    RunStep,
    TemplateInfo,
    WorkdirStep,
)
from sandgrid.wire import names, turnstream
from sandgrid.wire.builds import BuildJob, TemplateStore, build_events, final_event
from sandgrid.wire.type_store import TypeStore
from worker.egress.proxy import EgressProxy
from worker.templates.buildlog import BuildLog
from worker.templates.commit import ImageCommit
from worker.templates.errors import BuildFailed
from worker.templates.layer import Layer
from worker.templates.phases import Phases
from worker.templates.sandbox import BuildSandbox, SandboxEnded
from worker.templates.upper import UpperFailed, read_upper
from worker.templates.warm import BuildSandboxes, WarmKey

__all__ = ["TemplateBuilder"]

log = logging.getLogger(__name__)


class TemplateBuilder:
    """Runs the builds sent to this node.

    Args:
        node: this node's name (the build container's label).
        client: the Docker SDK client of the node's engine.
        redis_client: the grid's Redis (records, the egress booking).
        types: the catalog, where a built template becomes a type.
        egress: the node's egress proxy (None: builds have no network at all).
        egress_port: the in-sandbox relay's loopback port.
        registry: the grid's registry (``host:port``; empty: the image stays on this node).
        runsc_root: runsc's state directory under this engine (``runsc --root``).
        ensure_image: makes an image present on the node (``worker.images``), or None.
        warm: build sandboxes kept warm, one per kind (``warm.py``; 0: none).
    """

    def __init__(
        self,
        node: str,
        client: Any,
        redis_client: redis.Redis[str],
        types: TypeStore,
        *,
        egress: EgressProxy | None,
        egress_port: int,
        registry: str,
        runsc_root: Path,
        ensure_image: Callable[[str, str | None], str] | None = None,
        warm: int = 0,
    ) -> None:
        self.node = node
        self.client = client
        self.redis = redis_client
        self.records = TemplateStore(redis_client)
        self.types = types
        self.egress = egress
        self.egress_port = egress_port
        self.registry = registry
        self.committer = ImageCommit(client, registry, types)
        self.runsc_root = runsc_root
        self.ensure_image = ensure_image
        self._runsc: str | None = None  # the engine's runsc, asked on the first build
        self.sandboxes = BuildSandboxes(
            client, node, egress=egress, egress_port=egress_port, keep=warm
        )

    def warm_up(self, bases: list[SandboxTypeSpec]) -> None:
        """At the node's start: remove what an earlier process left, then make a warm
        sandbox of each base for a build with the default quotas (and network, when the
        node has its egress proxy). Only a base already on the node: none is pulled for a
        build that may never come (the first build of it pulls it, then warms)."""
        self.sandboxes.collect()
        quotas = BuildQuotas()
        for spec in bases:
            if not self._local(spec.image, spec.digest):
                log.info("warm build sandbox of %s: its image is not on this node", spec.name)
                continue
            try:
                image_id = str(self.client.api.inspect_image(spec.image)["Id"])
            except Exception as exc:
                log.warning("warm build sandbox of %s: %s", spec.name, type(exc).__name__)
                continue
            key = WarmKey(image_id, quotas.cpus, quotas.memory_mb, self.egress is not None)
            self.sandboxes.warm(key, spec.image)

    def close(self) -> None:
        """Remove the warm sandboxes (the node stops)."""
        self.sandboxes.close()

    def build(self, job: BuildJob) -> TemplateInfo:
        """Run ``job`` to its end; the record's final state is returned (and stored)."""
        info = self.records.get(job.tenant, job.spec.name)
        if info is None or info.build_id != job.build_id or info.state != "building":
            raise BuildFailed("the template's record is gone or belongs to another build")
        events = build_events(job.build_id)
        logbook = BuildLog(
            lambda text: self._save(info.model_copy(update={"log": text})),
            lambda chunk: self._event(events, {"type": "stdout", "data": chunk}),
        )
        work = Path(tempfile.mkdtemp(prefix=f"sg-build-{job.build_id}-"))
        phases = Phases()
        warm: tuple[WarmKey, str] | None = None
        try:
            with phases("base"):
                base, key = self._kind(job)
            tag, digest = self._run(job, info, base, key, logbook, work, phases)
            warm = key, base
            done = info.model_copy(
                update={"state": "ready", "log": logbook.text, "image": tag, "digest": digest}
            )
        except Exception as exc:
            if not isinstance(exc, BuildFailed):
                log.warning("template build %s: %s on the node", job.build_id, type(exc).__name__)
                exc = BuildFailed(f"the build failed on the node ({type(exc).__name__})")
            done = info.model_copy(
                update={
                    "state": "failed",
                    "log": logbook.text,
                    "error": exc.reason,
                    "failed_step": exc.step,
                    "exit_code": exc.exit_code,
                }
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
        done = done.model_copy(update={"finished": time.time()})
        self.records.put(done)
        self._event(events, final_event(done))  # after the record: a follower then reads it
        if warm is not None:  # the next build of its kind finds a sandbox ready
            threading.Thread(target=self.sandboxes.warm, args=warm, daemon=True).start()
        log.debug("template build %s: %s", job.build_id, phases.line())
        log.info(
            "template %s of %s: %s (build %s)", done.name, done.tenant, done.state, job.build_id
        )
        return done

    def _event(self, events: str, event: dict[str, object]) -> None:
        """Append to the build's stream; a Redis error loses the event, not the build
        (the record keeps the log)."""
        try:
            turnstream.append(self.redis, events, [event])
        except redis.RedisError as exc:
            log.warning("template build stream %s: %s", events, type(exc).__name__)

    def _save(self, info: TemplateInfo) -> None:
        current = self.records.get(info.tenant, info.name)
        if (
            current is not None
            and current.build_id == info.build_id
            and current.state == "building"
        ):
            self.records.put(info)

    def _kind(self, job: BuildJob) -> tuple[str, WarmKey]:
        """The base's image on this node, and the kind of build sandbox the build needs."""
        base = self._base_image(job.base)
        image_id = str(self.client.api.inspect_image(base)["Id"])
        network = job.spec.network is not None and self.egress is not None
        quotas = job.spec.quotas
        return base, WarmKey(image_id, quotas.cpus, quotas.memory_mb, network)

    def _sandbox(
        self, job: BuildJob, base: str, key: WarmKey, deadline: float, phases: Phases
    ) -> BuildSandbox:
        """The build's sandbox, running and booked for it alone: a warm one of its kind,
        or one made now."""
        sandbox = self.sandboxes.take(key, job.build_id)
        if sandbox is None:
            with phases("create"):
                sandbox = self.sandboxes.make(base, job.spec.quotas, key.network, job.build_id)
            with phases("start"):
                refused = sandbox.start()
            if refused:
                self.sandboxes.remove(sandbox)
                raise BuildFailed(refused)
        sandbox.bind(names.template_build_session(job.build_id), deadline)
        return sandbox

    def _run(
        self,
        job: BuildJob,
        info: TemplateInfo,
        base: str,
        key: WarmKey,
        logbook: BuildLog,
        work: Path,
        phases: Phases,
    ) -> tuple[str, str]:
        sid = names.template_build_session(job.build_id)
        if key.network:
            self._book(sid, job, info.deadline)
        sandbox: BuildSandbox | None = None
        try:
            sandbox = self._sandbox(job, base, key, info.deadline, phases)
            with phases("relay"):
                sandbox.await_relay()
            with phases("steps"):
                env = self._steps(job, sandbox, logbook)
            sandbox.stop()
            archive = work / "image.tar"
            with phases("upper"):
                layer = self._upper(sandbox, archive)
        except BaseException as exc:
            self._release(sandbox, sid, phases)
            if isinstance(exc, SandboxEnded):
                raise BuildFailed(str(exc)) from None
            raise
        # The sandbox's removal (~0.3 s under runsc) beside the commit, done before the record.
        release = threading.Thread(target=self._release, args=(sandbox, sid, phases), daemon=True)
        release.start()
        try:
            return self.committer.commit(job, base, layer, archive, env, phases)
        finally:
            release.join()

    def _release(self, sandbox: BuildSandbox | None, sid: str, phases: Phases) -> None:
        """Remove the build sandbox, its egress socket and booking; an error is logged (the
        booking expires with the build's deadline)."""
        with phases("remove"):
            try:
                if sandbox is not None:
                    self.sandboxes.remove(sandbox)
                self.redis.delete(names.session_key(sid))
            except Exception as exc:
                log.warning("template build %s: release: %s", sid, type(exc).__name__)

    def _base_image(self, base: SandboxTypeSpec) -> str:
        """The base's image on this node: here already (by tag, that digest or image id),
        or pulled from the registry."""
        if self.ensure_image is None or self._local(base.image, base.digest):
            return base.image
        try:
            return self.ensure_image(base.image, base.digest or None)
        except Exception as exc:
            raise BuildFailed(
                f"from: the base image {base.image} is not available: {exc}"
            ) from None

    def _local(self, image: str, digest: str) -> bool:
        try:
            found = self.client.api.inspect_image(image)
        except Exception:
            return False
        digests = [d.split("@", 1)[-1] for d in found.get("RepoDigests") or []]
        return not digest or digest == found.get("Id") or digest in digests

    def _book(self, sid: str, job: BuildJob, deadline: float) -> None:
        """Book the build's policy for the proxy under its pseudo-session."""
        assert job.spec.network is not None
        key = names.session_key(sid)
        self.redis.hset(
            key,
            mapping={
                "network": job.spec.network.model_dump_json(),
                "tenant": json.dumps(job.tenant),
            },
        )
        self.redis.expireat(key, int(deadline) + 300)

    def _steps(self, job: BuildJob, sandbox: BuildSandbox, logbook: BuildLog) -> dict[str, str]:
        """Run every step; the variables ``env`` steps set.

        Raises:
            BuildFailed: at the first failing step, or the deadline.
        """
        env: dict[str, str] = {}
        for i, step in enumerate(job.spec.steps):
            logbook(f"--- step {i + 1}/{len(job.spec.steps)}: {_describe(step)}\n")
            if isinstance(step, EnvStep):
                env.update(step.env)
                sandbox.env.update(step.env)
                continue
            if isinstance(step, WorkdirStep):
                mk = sandbox.run(["mkdir", "-p", step.workdir], logbook)
                if mk.exit_code != 0:
                    raise BuildFailed(f"steps[{i}]: workdir could not be made", i, mk.exit_code)
                sandbox.workdir = step.workdir
                continue
            if isinstance(step, RunStep):
                ran = sandbox.shell(step.run, logbook)
            else:
                assert isinstance(step, CopyStep)
                ran = sandbox.write(step.copy_, logbook)
            if ran.timed_out:
                raise BuildFailed(
                    f"steps[{i}]: the build's time quota ({job.spec.quotas.timeout_s} s) ran out",
                    i,
                    ran.exit_code,
                )
            if ran.exit_code != 0:
                raise BuildFailed(f"steps[{i}]: exited with {ran.exit_code}", i, ran.exit_code)
        return env

    def _upper(self, sandbox: BuildSandbox, archive: Path) -> Layer:
        """gVisor's upper layer of the sandbox, begun as the load archive (``upper.py``).

        Raises:
            SandboxEnded: PID 1 had ended (no step ran an exec to find it out).
        """
        if self._runsc is None:
            runtimes = self.client.info().get("Runtimes", {})
            self._runsc = str(runtimes.get("runsc", {}).get("path", "runsc"))
        try:
            return read_upper(self._runsc, self.runsc_root, sandbox.container.id, archive)
        except UpperFailed as exc:
            why = sandbox.ended()
            if why is not None:
                raise SandboxEnded(why) from None
            raise BuildFailed(f"the build's layer could not be read (runsc tar: {exc})") from None


def _describe(step: object) -> str:
    """What the log says of a step: its kind and, for ``run``, the command; never file contents."""
    if isinstance(step, RunStep):
        return f"run {step.run[:200]}"
    if isinstance(step, CopyStep):
        return f"copy {', '.join(sorted(step.copy_))}"
    if isinstance(step, EnvStep):
        return f"env {', '.join(sorted(step.env))}"
    assert isinstance(step, WorkdirStep)
    return f"workdir {step.workdir}"
