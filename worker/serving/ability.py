"""Whether this node can serve a sandbox type now: its image is here, its runtime too.

The node's heartbeat lists only the types that pass (``worker.serving.watch``),
so the API refuses at once (503 ``no_capacity``) a type that no node can run
instead of failing each create. ``image_ready`` is the one place that asks
whether a type's image is on this node's engine; a node with the grid's
registry (``SANDGRID_IMAGES__REGISTRY``) pulls a missing one from it there,
before it starts serving the type (issue 25.3).
"""

from __future__ import annotations

import logging

from sandgrid.errors import SandgridError
from sandgrid.sandbox_types import SandboxTypeSpec
from worker.sandboxes import SandboxManager

__all__ = ["can_serve", "image_ready", "runtime_ready"]

log = logging.getLogger(__name__)


def image_ready(manager: SandboxManager, spec: SandboxTypeSpec) -> bool:
    """Whether the image of ``spec`` is on the engine ``manager`` runs sandboxes on.

    With the grid's registry (``manager.images``, ``worker.images.ImagePuller``) a
    missing image is pulled now, once per node, and the answer is whether that
    worked; without it, whether the image is there by its tag. By tag either way,
    as ``SandboxManager`` creates from it: a type's digest may be the image's id
    on the engine that built it, which no registry knows.
    """
    if manager.images is None:
        return manager.engine.has_image(spec.image)
    try:
        manager.images(spec.image, None)
    except SandgridError as exc:
        log.warning("types: the image of %s could not be had: %s", spec.name, exc.code)
        return False
    return True


def runtime_ready(manager: SandboxManager) -> bool:
    """Whether the runtime ``manager`` uses is there (runsc: registered with the engine)."""
    return manager.engine.available()


def can_serve(manager: SandboxManager, spec: SandboxTypeSpec) -> str | None:
    """Why the node cannot serve ``spec`` now, or None when it can."""
    try:
        if not runtime_ready(manager):
            return f"runtime {spec.runtime} is not available"
        if not image_ready(manager, spec):
            return f"image {spec.image} is not on this node"
    except Exception as exc:  # an engine that does not answer: not servable, say why
        return f"the engine did not answer ({type(exc).__name__})"
    return None
