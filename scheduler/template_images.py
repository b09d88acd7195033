"""The grid's image registry as templates see it: a base by reference, a removed image (25.2).

A template's ``from`` is a sandbox type's name, or an image reference
(``repo:tag``, with or without the registry's ``host:port``) that must already
be in the grid's registry: the API asks the registry for its manifest digest
(the Registry HTTP API v2, over loopback) and the build pulls it by that
digest. Removing a template deletes its manifest from the registry (its blobs
go at the operator's next ``make registry-gc``).
"""

from __future__ import annotations

import httpx

from sandgrid.errors import ErrorCode, InfrastructureError, InvalidInput
from sandgrid.sandbox_types import SandboxTypeSpec

__all__ = ["MANIFEST_TYPES", "drop_manifest", "image_base", "is_image_reference"]

#: The manifest kinds asked for: a digest then names what ``docker pull`` gets.
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


def is_image_reference(base: str) -> bool:
    """Whether a template's ``from`` names an image (a ``/`` or ``:``), not a type."""
    return "/" in base or ":" in base


def _split(ref: str, registry: str) -> tuple[str, str]:
    """``(repository, tag)`` of ``ref``, the grid's own registry host left out."""
    if registry and ref.startswith(registry + "/"):
        ref = ref[len(registry) + 1 :]
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repo, tag


def _unreachable(registry: str, exc: Exception, operation: str) -> InfrastructureError:
    return InfrastructureError(
        f"the image registry {registry} could not be reached ({type(exc).__name__})",
        code=ErrorCode.REGISTRY_UNAVAILABLE,
        operation=operation,
    )


def image_base(ref: str, registry: str, name: str) -> SandboxTypeSpec:
    """The base of a template ``from`` an image of the grid's registry: that image by the
    digest the registry answers, under gVisor (the build's runtime).

    Raises:
        InvalidInput: no registry, or the registry has no such image (422 naming ``from``).
        InfrastructureError: the registry could not be reached (503).
    """
    if not registry:
        raise _no_image(ref, "this grid has no image registry (SANDGRID_IMAGES__REGISTRY)")
    repo, tag = _split(ref, registry)
    url = f"http://{registry}/v2/{repo}/manifests/{tag}"
    try:
        resp = httpx.head(url, headers={"Accept": MANIFEST_TYPES}, timeout=15)
    except httpx.HTTPError as exc:
        raise _unreachable(registry, exc, "templates.build") from None
    digest = resp.headers.get("Docker-Content-Digest", "")
    if resp.status_code != 200 or not digest.startswith("sha256:"):
        raise _no_image(ref, f"no image {repo}:{tag} in the grid's registry {registry}; push it")
    return SandboxTypeSpec(name=name, image=f"{repo}:{tag}", digest=digest, runtime="runsc")


def _no_image(ref: str, message: str) -> InvalidInput:
    return InvalidInput(
        f"from: {message}",
        operation="templates.build",
        context={
            "field": "from",
            "rule": "a sandbox type you may use, or an image of the registry",
        },
    )


def drop_manifest(image: str, digest: str) -> None:
    """Delete ``image``'s manifest ``digest`` from the registry its reference names
    (``host:port/repo:tag``); one already gone is fine.

    Raises:
        InfrastructureError: the registry refused or could not be reached.
    """
    host, _, rest = image.partition("/")
    repo = rest.rsplit(":", 1)[0]
    try:
        resp = httpx.delete(f"http://{host}/v2/{repo}/manifests/{digest}", timeout=30)
    except httpx.HTTPError as exc:
        raise _unreachable(host, exc, "templates.remove") from None
    if resp.status_code not in (200, 202, 404):
        raise InfrastructureError(
            f"the image registry {host} refused to delete {repo} ({resp.status_code})",
            code=ErrorCode.REGISTRY_UNAVAILABLE,
            operation="templates.remove",
        )
