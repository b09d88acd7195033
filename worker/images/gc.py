"""Garbage collection of a node's images of the grid's registry.

A node that pulled a type's image keeps it while the type exists. Once no type
names it (removed, or moved to a new digest) and no container of the node uses
it, ``collect_images`` removes its names under the registry's address; an
image goes with its last name, so one built on this node (``sandgrid/...``,
also tagged for the push) keeps its own name and stays. Images that never came
from the registry are none of its business. Removal is never forced: an image
a container took between the listing and the removal stays, and is collected
next time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from worker.images.engine import ImageEngine, LocalImage
from worker.images.refs import image_ref, in_registry

__all__ = ["collect_images", "referenced_names"]

log = logging.getLogger(__name__)


def referenced_names(referenced: Iterable[tuple[str, str | None]], registry: str) -> set[str]:
    """Every local name that is one of the ``(image, digest)`` pairs types name."""
    names: set[str] = set()
    for image, digest in referenced:
        ref = image_ref(image, registry, digest)
        names.update(ref.local_names)
        names.add(ref.remote)
    return names


def collect_images(
    engine: ImageEngine, registry: str, referenced: Iterable[tuple[str, str | None]]
) -> list[str]:
    """Remove the registry's images no type references and no container uses.

    Args:
        engine: the node's engine.
        registry: the grid registry's ``host:port``.
        referenced: the ``(image, digest)`` of every type in the catalog (digest
            None for a type that names a tag only).

    Returns:
        The names removed (tags and ``repo@digest`` references), in order.
    """
    keep = referenced_names(referenced, registry)
    used = engine.used_ids()
    removed: list[str] = []
    for image in engine.images():
        names = _registry_names(image, registry)
        if not names or image.id in used or keep.intersection(image.tags + image.digests):
            continue
        for name in names:
            engine.remove(name)
            removed.append(name)
            log.info("image gc: removed %s (%s)", name, image.id[:19])
    return removed


def _registry_names(image: LocalImage, registry: str) -> list[str]:
    """The names to remove: its registry tags; for an untagged image (pulled by
    digest), its registry digests. Removing an image's last tag removes it whole."""
    if image.tags:
        return [t for t in image.tags if in_registry(t, registry)]
    return [d for d in image.digests if in_registry(d, registry)]
