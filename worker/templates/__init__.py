"""Templates built on this node (issue 25, item 2; docs/templates.md).

``TemplateBuilder`` (``build.py``) runs a ``BuildJob``: the build sandbox
(``sandbox.py``: gVisor, no network but the egress proxy, the build's quotas),
gVisor's upper layer read out of it (``upper.py``) and made a Docker layer
(``layer.py``) as it comes, the image assembled over the base's layers
(``image.py``), pushed and registered as a type; the log (``buildlog.py``),
the phases' times (``phases.py``), the build sandboxes made and kept warm
(``warm.py``), the image pushed from its layer (``push.py``). ``node_builder``
makes this process's builder from the node's parts; ``warm_builds`` warms its
sandboxes at the node's start, ``close_builds`` removes them at its stop.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from sandgrid.wire import redis_connect
from worker.templates.build import TemplateBuilder
from worker.templates.errors import BuildFailed

if TYPE_CHECKING:
    from worker.node import Node

__all__ = ["BuildFailed", "TemplateBuilder", "close_builds", "node_builder", "warm_builds"]

log = logging.getLogger(__name__)

_builder: TemplateBuilder | None = None
_lock = threading.Lock()


def node_builder(node: Node) -> TemplateBuilder:
    """This process's builder, made on the first build from the node's parts."""
    global _builder
    with _lock:
        if _builder is None:
            import docker

            from sandgrid.wire.objects import open_objects
            from sandgrid.wire.type_store import TypeStore
            from worker.images import ImagePuller

            settings = node.settings
            client = redis_connect.connect(settings.redis_url, decode_responses=True)
            puller = ImagePuller.from_settings(settings, node.name)
            _builder = TemplateBuilder(
                node.name,
                docker.from_env(),
                client,
                TypeStore(client, open_objects(settings)),
                egress=node.egress,
                egress_port=settings.worker.egress.port,
                registry=settings.images.registry,
                runsc_root=settings.templates.runsc_root,
                ensure_image=puller.ensure if puller is not None else None,
                warm=settings.templates.warm,
            )
        return _builder


def warm_builds(node: Node) -> threading.Thread | None:
    """At the node's start, off its path: warm build sandboxes of the configured bases, on a
    node that runs gVisor (one that builds: it serves a runsc type) and keeps any."""
    settings = node.settings.templates
    if settings.warm <= 0 or not any(s.runtime == "runsc" for s in node.serving().values()):
        return None
    from sandgrid.wire.catalog import get_type

    def run() -> None:
        bases = []
        for name in settings.warm_bases:
            try:
                bases.append(get_type(name))
            except Exception:  # not in the catalog (yet): no warm sandbox of it
                log.info("warm build sandbox: no type %s", name)
        node_builder(node).warm_up(bases)

    thread = threading.Thread(target=run, name="warm-builds", daemon=True)
    thread.start()
    return thread


def close_builds() -> None:
    """Remove this process's warm build sandboxes (the node stops)."""
    with _lock:
        if _builder is not None:
            _builder.close()
