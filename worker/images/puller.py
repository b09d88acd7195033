"""A type's image on this node before its sandbox is made: present, or pulled once.

``ImagePuller.ensure(image, digest)`` is what a node calls before it creates a
sandbox of a type (``SandboxManager`` does, for every create): the image
present on the engine costs one inspect; absent, it is pulled from the grid's
registry (by digest when the type gives one), once per node however many
callers ask at the same time (they wait for the same pull and share its
outcome), and its time is observed (``sandgrid_worker_image_pull_seconds``)
and logged on one line (the reference, the seconds, the outcome: nothing
secret, the registry takes no credentials). A registry without the image, or
out of reach, is a ``CapacityError`` (503) whose message names the image and
the registry and whose context says ``"reason": "image_unavailable"``: a plain
``CapacityError`` so that it crosses the Celery result as itself.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandgrid.errors import CapacityError
from sandgrid.wire.catalog import metric_image
from worker import metrics
from worker.images.engine import DockerImages, ImageEngine, PullFailed
from worker.images.refs import ImageRef, image_ref

if TYPE_CHECKING:
    from sandgrid.wire.settings import Settings

__all__ = ["IMAGE_UNAVAILABLE", "PULL_READ_TIMEOUT_S", "ImagePuller"]

log = logging.getLogger(__name__)

#: The Docker client's read timeout while it pulls (a pull streams progress).
PULL_READ_TIMEOUT_S = 300


IMAGE_UNAVAILABLE = "image_unavailable"
"""The ``reason`` in the context of the error of an image neither here nor to be pulled."""


@dataclass
class _Flight:
    """One pull under way: its callers wait on ``done`` and share its outcome."""

    done: threading.Event = field(default_factory=threading.Event)
    reference: str = ""
    error: BaseException | None = None


class ImagePuller:
    """Make sure an image is on this node's engine, pulling it from the registry once.

    Args:
        engine: the node's engine (``DockerImages`` over the runtime's client).
        registry: the grid registry's ``host:port`` (``SANDGRID_IMAGES__REGISTRY``).
        node: this node's name (in the log line and the error's context).
    """

    def __init__(self, engine: ImageEngine, registry: str, *, node: str) -> None:
        self.engine = engine
        self.registry = registry
        self.node = node
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}

    @classmethod
    def from_settings(cls, settings: Settings, node: str) -> ImagePuller | None:
        """The node's puller over ``DOCKER_HOST``'s engine; None when no registry is set."""
        if not settings.images.registry:
            return None
        import docker

        client = docker.from_env(timeout=PULL_READ_TIMEOUT_S)
        return cls(DockerImages(client), settings.images.registry, node=node)

    def ensure(self, image: str, digest: str | None = None) -> str:
        """The local reference to create the type's sandboxes from, pulled if need be.

        Args:
            image: the type's image name (``sandgrid/sandbox-python:latest``).
            digest: the type's image digest (``sha256:...``), when it has one:
                then only that manifest will do, and it is what is pulled.

        Returns:
            A reference the engine resolves: the name present, else the
            registry's ``host/repo@digest`` (or ``host/repo:tag``) just pulled.

        Raises:
            InvalidInput: a malformed name or digest, or another registry's.
            CapacityError: absent here, and the registry lacks it or is out of reach
                (context ``reason``: ``image_unavailable``).
        """
        ref = image_ref(image, self.registry, digest)
        for name in ref.local_names:
            if self.engine.has(name):
                return name
        return self._pull_once(ref)

    def _pull_once(self, ref: ImageRef) -> str:
        """Pull ``ref``, or wait for the pull of it already under way."""
        with self._lock:
            flight = self._flights.get(ref.remote)
            leader = flight is None
            if flight is None:
                flight = self._flights[ref.remote] = _Flight()
        if not leader:
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.reference
        try:
            flight.reference = self._pull(ref)
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[ref.remote]
            flight.done.set()
        return flight.reference

    def _pull(self, ref: ImageRef) -> str:
        """One pull from the registry: timed, counted, logged."""
        t0 = time.perf_counter()
        outcome = "ok"
        try:
            self.engine.pull(ref.remote)
        except PullFailed as exc:
            outcome = "missing" if exc.missing else "failed"
            raise self._unavailable(ref, exc) from exc
        finally:
            seconds = time.perf_counter() - t0
            repository = metric_image(ref.image, ref.repository)
            metrics.IMAGE_PULL_SECONDS.labels(repository=repository, outcome=outcome).observe(
                seconds
            )
            log.info(
                "image pull: node=%s reference=%s outcome=%s seconds=%.3f",
                self.node,
                ref.remote,
                outcome,
                seconds,
            )
        return ref.remote

    def _unavailable(self, ref: ImageRef, exc: PullFailed) -> CapacityError:
        what = "has no" if exc.missing else "could not serve"
        return CapacityError(
            f"image {ref.image}{'@' + ref.digest if ref.digest else ''}: not on node "
            f"{self.node}, and the grid's registry {self.registry} {what} {ref.remote} ({exc})",
            operation="create",
            context={
                "reason": IMAGE_UNAVAILABLE,
                "image": ref.image,
                "reference": ref.remote,
                "registry": self.registry,
            },
        )
