"""The image pushed straight from the build's layer is what ``docker push`` would write (25): the
base's layers mounted from its repository, the layer gzipped, the configuration, a schema-2
manifest naming them, its digest answered; a base the registry holds otherwise is not used."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import httpx
import pytest

from worker.templates import push

BASE_ID = "sha256:" + "c" * 64
BASE_LAYERS = [
    {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 10, "digest": d}
    for d in ("sha256:" + "1" * 64, "sha256:" + "2" * 64)
]


class _Registry:
    """A registry that keeps blobs and manifests; ``refuse_mount`` answers a mount 202."""

    def __init__(self, refuse_mount: bool = False) -> None:
        self.blobs: dict[str, bytes] = {}
        self.mounted: list[tuple[str, str]] = []
        self.manifests: dict[str, bytes] = {}
        self.refuse_mount = refuse_mount

    def __call__(self, req: httpx.Request) -> httpx.Response:
        path = req.url.path
        if req.method == "GET" and "/manifests/" in path:
            body = {"schemaVersion": 2, "config": {"digest": BASE_ID}, "layers": BASE_LAYERS}
            return httpx.Response(200, json=body, headers={"Content-Type": push.MANIFEST_V2})
        if req.method == "HEAD":
            return httpx.Response(200 if path.rsplit("/", 1)[1] in self.blobs else 404)
        if req.method == "POST" and "mount" in req.url.params:
            if self.refuse_mount:
                return httpx.Response(202, headers={"Location": "/v2/x/blobs/uploads/u0"})
            self.mounted.append((req.url.params["mount"], req.url.params["from"]))
            return httpx.Response(201)
        if req.method == "POST":
            return httpx.Response(202, headers={"Location": f"{path}u{len(self.blobs)}?_state=s"})
        if req.method == "PUT" and "/blobs/" in path:
            data = req.read()
            digest = req.url.params["digest"]
            assert digest == "sha256:" + hashlib.sha256(data).hexdigest()
            assert req.url.params["_state"] == "s"  # the upload's own query kept
            self.blobs[digest] = data
            return httpx.Response(201)
        if req.method == "PUT":
            self.manifests[path] = req.read()
            return httpx.Response(201)
        return httpx.Response(405)


def _layer(tmp_path: Path) -> tuple[Path, bytes]:
    data = b"layer-bytes" * 1000
    archive = tmp_path / "image.tar"
    archive.write_bytes(b"\0" * 512 + data + b"tail")
    return archive, data


def test_the_manifest_names_the_base_layers_then_the_gzipped_layer(tmp_path: Path) -> None:
    registry = _Registry()
    archive, data = _layer(tmp_path)
    with httpx.Client(transport=httpx.MockTransport(registry)) as client:
        base = push.base_manifest(
            client, "reg:5000", "sandgrid/base", "sha256:" + "d" * 64, BASE_ID
        )
        assert base is not None
        blob = push.gzip_layer(archive, 512, len(data), tmp_path / "layer.tar.gz")
        config = {"rootfs": {"type": "layers", "diff_ids": ["a", "b", "c"]}}
        digest = push.push_image(client, "reg:5000", "sandgrid/tpl-a-b", "b1", base, blob, config)
    assert gzip.decompress(registry.blobs[blob.digest]) == data
    assert sorted(registry.mounted) == [(d["digest"], "sandgrid/base") for d in BASE_LAYERS]
    body = registry.manifests["/v2/sandgrid/tpl-a-b/manifests/b1"]
    assert digest == "sha256:" + hashlib.sha256(body).hexdigest()
    manifest = json.loads(body)
    assert manifest["mediaType"] == push.MANIFEST_V2
    assert manifest["layers"][:2] == BASE_LAYERS
    assert manifest["layers"][2]["digest"] == blob.digest
    raw = registry.blobs[manifest["config"]["digest"]]
    assert json.loads(raw) == config


def test_a_base_of_another_configuration_is_not_pushed_over(tmp_path: Path) -> None:
    with httpx.Client(transport=httpx.MockTransport(_Registry())) as client:
        other = "sha256:" + "e" * 64  # the engine ran the build on another image
        assert (
            push.base_manifest(client, "reg:5000", "sandgrid/base", "sha256:" + "d" * 64, other)
            is None
        )


def test_a_refused_mount_fails_the_push(tmp_path: Path) -> None:
    archive, data = _layer(tmp_path)
    with httpx.Client(transport=httpx.MockTransport(_Registry(refuse_mount=True))) as client:
        base = push.BaseManifest("sandgrid/base", {"layers": BASE_LAYERS})
        blob = push.gzip_layer(archive, 512, len(data), tmp_path / "layer.tar.gz")
        with pytest.raises(push.PushFailed, match="did not mount"):
            push.push_image(client, "reg:5000", "sandgrid/t", "b1", base, blob, {})
