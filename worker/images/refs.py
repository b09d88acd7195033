"""Image references: what a type names, and where the grid's registry holds it.

A type names its image as operators build it (``sandgrid/sandbox-python:latest``)
and, once pushed, by its digest (``sha256:...``). The registry holds the same
repository under its own address (``127.0.0.1:5000/sandgrid/sandbox-python``);
a node pulls by digest when there is one, so what runs is what was pushed,
whatever the tag points at since. Pure: no engine, no network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sandgrid.errors import InvalidInput

__all__ = ["DIGEST", "ImageRef", "image_ref", "in_registry"]

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
"""The only digest form the grid accepts (what ``docker push`` prints)."""
_NAME = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _has_host(first: str) -> bool:
    """Docker's rule: a first path component with a dot, a colon or ``localhost`` is a host."""
    return "." in first or ":" in first or first == "localhost"


@dataclass(frozen=True)
class ImageRef:
    """One image as a node must have it.

    Attributes:
        image: the name the type gives (``repo:tag``, maybe with a registry host).
        repository: its repository in the grid's registry, without the host.
        tag: its tag (``latest`` when the name gives none).
        digest: its manifest digest, or None (then the tag decides).
        registry: the grid registry's address (``host:port``).
    """

    image: str
    repository: str
    tag: str
    digest: str | None
    registry: str

    @property
    def remote(self) -> str:
        """The reference a node pulls and runs: ``registry/repo@digest``, else ``:tag``."""
        at = f"@{self.digest}" if self.digest else f":{self.tag}"
        return f"{self.registry}/{self.repository}{at}"

    @property
    def local_names(self) -> tuple[str, ...]:
        """The references that, present on a node, are this image.

        With a digest only the registry's ``repo@digest`` (Docker answers it for
        an image pulled by it, or built here and pushed); without one the name
        the type gives, then the registry's ``repo:tag``.
        """
        if self.digest:
            return (self.remote,)
        return tuple(dict.fromkeys((self.image, self.remote)))


def image_ref(image: str, registry: str, digest: str | None = None) -> ImageRef:
    """Parse a type's image name (and digest) against the grid's registry.

    Args:
        image: ``repo[:tag]``, with or without a registry host; a name with
            ``@sha256:...`` carries its digest.
        registry: the grid registry's ``host:port``. A name whose host is another
            registry is refused: nodes pull from the grid's registry only.
        digest: the type's digest (``sha256:`` and 64 hex digits), if any.

    Raises:
        InvalidInput: a malformed name, tag or digest, or another registry's host.
    """
    name, _, at = image.partition("@")
    digest = digest or at or None
    if digest is not None and not DIGEST.match(digest):
        raise _bad("image.digest", digest, "sha256: and 64 lowercase hex digits")
    if at and at != digest:
        raise _bad("image.digest", str(digest), f"the digest of {image!r}")
    first, _, rest = name.partition("/")
    if rest and _has_host(first):
        if first != registry:
            raise _bad("image", image, f"an image of the grid's registry {registry}")
        name = rest
    repository, tag = name, "latest"
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repository, tag = name.rsplit(":", 1)
    if not _NAME.match(repository):
        raise _bad("image", image, "a repository of lowercase letters, digits and . _ - /")
    if not _TAG.match(tag):
        raise _bad("image", image, "a tag of letters, digits, _ . - (at most 128)")
    return ImageRef(image, repository, tag, digest, registry)


def in_registry(reference: str, registry: str) -> bool:
    """Whether a local tag or digest reference names an image of the grid's registry."""
    return reference.startswith(f"{registry}/")


def _bad(field: str, value: str, rule: str) -> InvalidInput:
    return InvalidInput(
        f"{field}: {value!r} is not {rule}",
        context={"field": field, "rule": rule, "value": value},
    )
