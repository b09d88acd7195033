"""A built template's image pushed straight to the grid's registry from its layer (25, measured).

What ``docker load`` then ``docker push`` did, without the engine: the base's
layers are mounted from the base's repository (the registry has them, the
base was pulled from there), the build's layer is gzipped (level 1) and
uploaded, then the image's configuration and its manifest (Docker's schema 2,
what ``docker push`` writes: the base's layer descriptors, then the new one).
The engine never loads the image on the build's path: the build's node pulls
it on its first session, as every other node does (``worker.images``), and gets
the same image (its id is the configuration's digest, which this uploads).

Only a base that is the registry's image is pushed this way: its manifest is
asked for by the base's digest and must name the configuration the engine ran
the build on (the base image's id); otherwise ``push_image`` answers None and
the builder loads and pushes through the engine as before. Registry HTTP API
v2 over loopback, no credentials (``scheduler.template_images``).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

__all__ = [
    "MANIFEST_V2",
    "BaseManifest",
    "Blob",
    "PushFailed",
    "base_manifest",
    "gzip_layer",
    "new_client",
    "push_image",
]

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
_CONFIG = "application/vnd.docker.container.image.v1+json"
_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
_CHUNK = 1 << 20
_TIMEOUT_S = 120


class PushFailed(Exception):
    """The registry refused a part of the image: which, and its status."""


@dataclass(frozen=True)
class BaseManifest:
    """The base image as the registry holds it: its repository and schema-2 manifest."""

    repository: str
    manifest: dict[str, Any]


@dataclass(frozen=True)
class Blob:
    """A blob to upload: its digest, its size, the file holding it."""

    digest: str
    size: int
    path: Path


def base_manifest(
    client: httpx.Client, registry: str, repository: str, digest: str, image_id: str
) -> BaseManifest | None:
    """The base's manifest in the registry, if it is the image the build ran on.

    Args:
        client: an HTTP client.
        registry: the registry's ``host:port``.
        repository: the base's repository there (no host).
        digest: the base's manifest digest.
        image_id: the local base image's id (its configuration's digest).

    Returns:
        None when the registry lacks it, it is not a schema-2 manifest (a list,
        an index), or it names another configuration than ``image_id``.
    """
    url = f"http://{registry}/v2/{repository}/manifests/{digest}"
    try:
        resp = client.get(url, headers={"Accept": MANIFEST_V2})
    except httpx.HTTPError:
        return None
    if resp.status_code != 200 or resp.headers.get("Content-Type", "") != MANIFEST_V2:
        return None
    manifest = resp.json()
    if (manifest.get("config") or {}).get("digest") != image_id:
        return None
    return BaseManifest(repository, manifest)


def gzip_layer(archive: Path, offset: int, size: int, out: Path) -> Blob:
    """Gzip (level 1) the layer that ``archive`` holds at ``offset`` into ``out``, hashed
    on the way: the blob to upload."""
    sha = hashlib.sha256()
    packer = zlib.compressobj(1, zlib.DEFLATED, 31)  # 31: the gzip container
    written = 0
    with archive.open("rb") as src, out.open("wb") as dst:
        src.seek(offset)
        left = size
        while left:
            data = src.read(min(_CHUNK, left))
            if not data:
                raise PushFailed("the layer ended short in its archive")
            left -= len(data)
            written += _put(dst, sha, packer.compress(data))
        written += _put(dst, sha, packer.flush())
    return Blob(f"sha256:{sha.hexdigest()}", written, out)


def _put(dst: IO[bytes], sha: Any, data: bytes) -> int:
    sha.update(data)
    dst.write(data)
    return len(data)


def push_image(
    client: httpx.Client,
    registry: str,
    repository: str,
    tag: str,
    base: BaseManifest,
    layer: Blob,
    config: dict[str, Any],
) -> str:
    """Push the image (the base's layers, then ``layer``) as ``repository:tag``.

    Returns:
        The manifest's digest (what the registry serves it by).

    Raises:
        PushFailed: the registry refused a mount, an upload or the manifest.
    """
    raw = json.dumps(config, sort_keys=True).encode()
    config_digest = f"sha256:{hashlib.sha256(raw).hexdigest()}"
    layers = list(base.manifest.get("layers") or [])
    with ThreadPoolExecutor(max_workers=4) as pool:  # mounts and uploads are independent
        jobs = [
            pool.submit(_mount, client, registry, repository, base.repository, d["digest"])
            for d in layers
        ]
        jobs.append(pool.submit(_upload, client, registry, repository, layer.digest, layer))
        jobs.append(pool.submit(_upload, client, registry, repository, config_digest, raw))
        for job in jobs:
            job.result()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_V2,
        "config": {"mediaType": _CONFIG, "size": len(raw), "digest": config_digest},
        "layers": [*layers, {"mediaType": _LAYER, "size": layer.size, "digest": layer.digest}],
    }
    body = json.dumps(manifest, indent=3).encode()
    url = f"http://{registry}/v2/{repository}/manifests/{tag}"
    resp = client.put(url, content=body, headers={"Content-Type": MANIFEST_V2})
    if resp.status_code != 201:
        raise PushFailed(f"the registry refused the manifest ({resp.status_code})")
    return f"sha256:{hashlib.sha256(body).hexdigest()}"


def _mount(client: httpx.Client, registry: str, repo: str, source: str, digest: str) -> None:
    """Mount a base layer into ``repo`` from the base's repository (no bytes move)."""
    url = f"http://{registry}/v2/{repo}/blobs/uploads/"
    resp = client.post(url, params={"mount": digest, "from": source})
    if resp.status_code == 201:
        return
    raise PushFailed(f"the registry did not mount the base's layer {digest} ({resp.status_code})")


def _upload(
    client: httpx.Client, registry: str, repo: str, digest: str, data: Blob | bytes
) -> None:
    """One blob, in one ``PUT`` after its upload is opened (a blob there already is kept)."""
    base = f"http://{registry}/v2/{repo}/blobs/"
    if client.head(base + digest).status_code == 200:
        return
    opened = client.post(base + "uploads/")
    location = opened.headers.get("Location", "")
    if opened.status_code != 202 or not location:
        raise PushFailed(f"the registry did not open an upload ({opened.status_code})")
    url = httpx.URL(location if "://" in location else f"http://{registry}{location}")
    content = data if isinstance(data, bytes) else _read(data)
    size = len(data) if isinstance(data, bytes) else data.size
    headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
    done = client.put(url.copy_merge_params({"digest": digest}), content=content, headers=headers)
    if done.status_code != 201:
        raise PushFailed(f"the registry refused the blob {digest} ({done.status_code})")


def _read(blob: Blob) -> Iterator[bytes]:
    with blob.path.open("rb") as f:
        while data := f.read(_CHUNK):
            yield data


def new_client() -> httpx.Client:
    """An HTTP client for the registry (keep-alive across the push's requests)."""
    return httpx.Client(timeout=_TIMEOUT_S, limits=httpx.Limits(max_connections=8))
