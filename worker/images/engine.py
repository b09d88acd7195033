"""What image distribution needs of a node's engine, and its Docker implementation.

``ImageEngine`` is the small surface ``ImagePuller`` and ``collect_images`` use:
is a reference present, pull one, list the images, which images containers
use, remove a reference. ``DockerImages`` is it over the Docker SDK (the
node's own engine: ``DOCKER_HOST``); the unit tests give a fake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["DockerImages", "ImageEngine", "LocalImage", "PullFailed"]


class PullFailed(Exception):
    """The engine could not pull a reference.

    Attributes:
        missing: the registry answered that it has no such manifest (rather
            than being unreachable, or another fault).
    """

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class LocalImage:
    """One image on the node: its id and every name it has there."""

    id: str
    tags: tuple[str, ...]
    digests: tuple[str, ...]


class ImageEngine(Protocol):
    """The image operations of a node's engine."""

    def has(self, reference: str) -> bool:
        """Whether the engine resolves ``reference`` (a tag or ``repo@digest``)."""
        ...

    def pull(self, reference: str) -> None:
        """Pull ``reference`` (``host/repo:tag`` or ``host/repo@digest``); raise ``PullFailed``."""
        ...

    def images(self) -> list[LocalImage]:
        """Every image the engine holds."""
        ...

    def used_ids(self) -> set[str]:
        """The ids of the images of every container, running or not."""
        ...

    def remove(self, reference: str) -> None:
        """Untag ``reference`` (the image goes when its last name does); never forced."""
        ...


_MISSING = ("manifest unknown", "not found", "name unknown")


class DockerImages:
    """``ImageEngine`` over a ``docker.DockerClient``.

    Args:
        client: the node's engine (the runtime's own client).
    """

    def __init__(self, client: Any) -> None:
        self.client = client

    def has(self, reference: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self.client.api.inspect_image(reference)
        except ImageNotFound:
            return False
        return True

    def pull(self, reference: str) -> None:
        from docker.errors import APIError

        repository, sep, rest = reference.rpartition("@")
        if not sep:
            repository, _, rest = reference.rpartition(":")
        try:
            for event in self.client.api.pull(repository, tag=rest, stream=True, decode=True):
                if "error" in event:
                    raise _failed(str(event["error"]))
        except APIError as exc:
            raise _failed(str(exc.explanation or exc)) from exc

    def images(self) -> list[LocalImage]:
        return [
            LocalImage(
                str(raw["Id"]),
                tuple(t for t in raw.get("RepoTags") or () if t != "<none>:<none>"),
                tuple(d for d in raw.get("RepoDigests") or () if not d.startswith("<none>")),
            )
            for raw in self.client.api.images(all=False)
        ]

    def used_ids(self) -> set[str]:
        return {str(c["ImageID"]) for c in self.client.api.containers(all=True)}

    def remove(self, reference: str) -> None:
        from docker.errors import NotFound

        try:
            self.client.api.remove_image(reference, force=False, noprune=False)
        except NotFound:
            return


def _failed(message: str) -> PullFailed:
    return PullFailed(message, missing=any(word in message.lower() for word in _MISSING))
