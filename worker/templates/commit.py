"""A built template's image: its size checked, pushed to the grid's registry, registered (25.2).

The push goes straight from the build's layer when the base is the registry's
image (``push.py``: the base's layers mounted, one layer uploaded, no engine on
the way); otherwise, or with no registry, the image is loaded into the engine
(``image.py``'s archive) and pushed from there. The type it becomes is
registered last: the template's, gVisor, the tenant's only.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx

from sandgrid.errors import InvalidInput
from sandgrid.sandbox_types import SandboxTypeSpec
from sandgrid.wire.builds import BuildJob
from sandgrid.wire.type_store import TypeStore
from worker.images.refs import image_ref
from worker.templates import push
from worker.templates.errors import BuildFailed
from worker.templates.image import LAYER_OFFSET, finish_archive, image_config
from worker.templates.layer import Layer
from worker.templates.phases import Phases

__all__ = ["ImageCommit"]


class ImageCommit:
    """Commits a build's layer as the template's image and type.

    Args:
        client: the Docker SDK client of the node's engine.
        registry: the grid's registry (``host:port``; empty: the image stays on this node).
        types: the catalog, where a built template becomes a type.
    """

    def __init__(self, client: Any, registry: str, types: TypeStore) -> None:
        self.client = client
        self.registry = registry
        self.types = types

    def commit(
        self,
        job: BuildJob,
        base: str,
        layer: Layer,
        archive: Path,
        env: dict[str, str],
        phases: Phases,
    ) -> tuple[str, str]:
        """Size check, then the push straight from the layer (``push.py``), or the engine's
        load and push when the base is not the registry's image: its reference and digest."""
        base_info = self.client.api.inspect_image(base)
        size = int(base_info.get("Size", 0)) + layer.size
        ceiling = job.spec.quotas.image_mb << 20
        if size > ceiling:
            raise BuildFailed(
                f"quotas.image_mb: the image would be {size >> 20} MiB, "
                f"above {job.spec.quotas.image_mb}"
            )
        path = f"sandgrid/tpl-{job.tenant}-{job.spec.name}"
        repo = f"{self.registry}/{path}" if self.registry else path
        tag = f"{repo}:{job.build_id}"
        config = image_config(base_info, layer, env)
        if self.registry:
            digest = self._push_layer(job, base_info, layer, archive, config, path, phases)
            if digest is not None:
                with phases("register"):
                    self.types.put(_template_type(job, tag, digest))
                return tag, digest
        with phases("archive"):
            finish_archive(config, tag, archive)
        try:
            with phases("load"), archive.open("rb") as f:
                self.client.images.load(f)
            with phases("push"):
                digest = self._push(repo, job.build_id, tag)
            with phases("register"):
                self.types.put(_template_type(job, tag, digest))
        except BaseException:
            self._drop_image(tag)  # a failed push or registration leaves no image
            raise
        return tag, digest

    def _push_layer(
        self,
        job: BuildJob,
        base_info: dict[str, Any],
        layer: Layer,
        archive: Path,
        config: dict[str, Any],
        path: str,
        phases: Phases,
    ) -> str | None:
        """Push the image from its layer, the base's layers mounted (``push.py``): its
        digest, or None when the base is not the registry's image (the engine pushes then).

        Raises:
            BuildFailed: the registry refused a part of it.
        """
        try:
            ref = image_ref(job.base.image, self.registry, job.base.digest or None)
        except InvalidInput:
            return None  # another registry's name: not a base to mount from
        digest = ref.digest or _repo_digest(base_info, f"{self.registry}/{ref.repository}")
        if not digest:
            return None
        try:
            with push.new_client() as client:
                with phases("manifest"):
                    found = push.base_manifest(
                        client, self.registry, ref.repository, digest, str(base_info.get("Id"))
                    )
                if found is None:
                    return None
                with phases("gzip"):
                    blob = push.gzip_layer(
                        archive, LAYER_OFFSET, layer.size, archive.with_name("layer.tar.gz")
                    )
                with phases("push"):
                    return push.push_image(
                        client, self.registry, path, job.build_id, found, blob, config
                    )
        except (push.PushFailed, httpx.HTTPError) as exc:
            raise BuildFailed(f"the image could not be pushed to the registry: {exc}") from None

    def _push(self, repo: str, tag_name: str, tag: str) -> str:
        if not self.registry:
            return str(self.client.api.inspect_image(tag)["Id"])
        for line in self.client.images.push(repo, tag=tag_name, stream=True, decode=True):
            if "error" in line:
                raise BuildFailed(f"the image could not be pushed to the registry: {line['error']}")
        digest = _repo_digest(self.client.api.inspect_image(tag), repo)
        if not digest:
            raise BuildFailed("the registry answered no digest for the pushed image")
        return digest

    def _drop_image(self, tag: str) -> None:
        if not tag:
            return
        with contextlib.suppress(Exception):  # gone already: nothing to do
            self.client.images.remove(tag, force=True)


def _repo_digest(info: dict[str, Any], repo: str) -> str:
    """The digest the engine knows ``info``'s image by in ``repo`` (pulled or pushed), or ""."""
    for ref in info.get("RepoDigests") or []:
        if ref.startswith(repo + "@"):
            return str(ref.split("@", 1)[1])
    return ""


def _template_type(job: BuildJob, tag: str, digest: str) -> SandboxTypeSpec:
    """The template's type: the base's quotas and network rules, gVisor, the tenant's only."""
    base = job.base
    return SandboxTypeSpec(
        name=job.spec.name,
        image=tag,
        digest=digest,
        runtime="runsc",
        network_allowed=base.network_allowed,
        default_network=base.default_network,
        quotas=dict(base.quotas),
        ceilings=dict(base.ceilings),
        pool_size=0,
        tenant=job.tenant,
        source="api",
    )
