"""Images reach every node through the grid's registry (issue 25, item 3).

``ImagePuller.ensure`` (``puller.py``) makes a type's image present on this
node before a sandbox of it is made, pulling it from the registry
(``SANDGRID_IMAGES__REGISTRY``, ``deploy/local/registry.sh``) once however many
ask; ``collect_images`` (``gc.py``) removes the registry's images no type
references and no container uses; ``refs.py`` maps a type's image name and
digest onto the registry; ``engine.py`` is what they need of Docker.
docs/operations.md, "Images and the registry".
"""

from __future__ import annotations

from worker.images.engine import DockerImages, ImageEngine, LocalImage, PullFailed
from worker.images.gc import collect_images, referenced_names
from worker.images.puller import IMAGE_UNAVAILABLE, ImagePuller
from worker.images.refs import ImageRef, image_ref

__all__ = [
    "IMAGE_UNAVAILABLE",
    "DockerImages",
    "ImageEngine",
    "ImagePuller",
    "ImageRef",
    "LocalImage",
    "PullFailed",
    "collect_images",
    "image_ref",
    "referenced_names",
]
