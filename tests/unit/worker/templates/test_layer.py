"""gVisor's upper layer made a Docker layer (25.2): whiteouts, opaque dirs, the grid's paths
left out, the diff id the sha256 of the tar; and the image over the base's layers."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from worker.templates.image import LAYER, finish_archive, image_config, write_layer
from worker.templates.layer import Layer, docker_layer


def _upper(path: Path) -> Path:
    """A tar as ``runsc tar rootfs-upper`` writes it (overlayfs whiteouts)."""
    with tarfile.open(path, "w:", format=tarfile.PAX_FORMAT) as tar:
        for name in (
            "./",
            "./etc/",
            "./opt/",
            "./opt/sandgrid/",
            "./run/",
            "./run/sandgrid-egress/",
        ):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        data = b"hello"
        info = tarfile.TarInfo("./etc/new.conf")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        gone = tarfile.TarInfo("./etc/issue")
        gone.type, gone.devmajor, gone.devminor = tarfile.CHRTYPE, 0, 0
        tar.addfile(gone)
        opaque = tarfile.TarInfo("./usr/share/doc/")
        opaque.type = tarfile.DIRTYPE
        opaque.pax_headers = {"SCHILY.xattr.trusted.overlay.opaque": "y"}
        tar.addfile(opaque)
        agent = tarfile.TarInfo("./opt/sandgrid/agent.py")
        tar.addfile(agent, io.BytesIO(b""))
        hosts = tarfile.TarInfo("./etc/hosts")
        tar.addfile(hosts, io.BytesIO(b""))
    return path


def _layer(tmp_path: Path) -> Layer:
    """The upper tar, read as a pipe is (in order), rewritten into ``layer.tar``."""
    with _upper(tmp_path / "upper.tar").open("rb") as src, (tmp_path / "layer.tar").open("wb") as f:
        return docker_layer(src, f)


def test_whiteouts_and_opaque_dirs_become_dockers_and_the_grids_paths_are_left_out(
    tmp_path: Path,
) -> None:
    layer = _layer(tmp_path)
    with tarfile.open(tmp_path / "layer.tar") as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.extractfile(members["etc/new.conf"]).read() == b"hello"  # type: ignore[union-attr]
    assert "etc/.wh.issue" in members and members["etc/.wh.issue"].isreg()
    assert "etc/issue" not in members
    assert "usr/share/doc/.wh..wh..opq" in members
    assert not any("overlay" in k for m in members.values() for k in m.pax_headers)
    assert not [n for n in members if n.startswith(("opt/sandgrid", "run/sandgrid-egress"))]
    assert "etc/hosts" not in members
    digest = hashlib.sha256((tmp_path / "layer.tar").read_bytes()).hexdigest()
    assert (
        layer.diff_id == f"sha256:{digest}"
        and layer.size == (tmp_path / "layer.tar").stat().st_size
    )


def test_the_image_keeps_the_bases_config_adds_env_and_carries_only_the_new_layer(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "image.tar"
    with _upper(tmp_path / "upper.tar").open("rb") as src:
        layer = write_layer(archive, lambda out: docker_layer(src, out))
    base = {
        "Architecture": "amd64",
        "Os": "linux",
        "Config": {"Env": ["PATH=/usr/bin", "PIP_NO_INDEX=1"], "Cmd": ["python3"]},
        "RootFS": {"Layers": ["sha256:" + "1" * 64, "sha256:" + "2" * 64]},
    }
    config = image_config(base, layer, {"PIP_NO_INDEX": "0", "FOO": "bar"})
    assert config["config"]["Env"] == ["PATH=/usr/bin", "PIP_NO_INDEX=0", "FOO=bar"]
    assert config["config"]["Cmd"] == ["python3"]
    assert config["rootfs"]["diff_ids"] == [*base["RootFS"]["Layers"], layer.diff_id]  # type: ignore[index]
    finish_archive(config, "reg:5000/sandgrid/tpl-a-b:1", archive)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        carried = tar.extractfile(LAYER).read()  # type: ignore[union-attr]
    assert manifest[0]["RepoTags"] == ["reg:5000/sandgrid/tpl-a-b:1"]
    assert len(manifest[0]["Layers"]) == 3
    assert [n for n in names if n.endswith("layer.tar")] == [manifest[0]["Layers"][-1]]
    assert manifest[0]["Config"] in names
    # the layer written in place is the layer whose diff id the config names
    assert f"sha256:{hashlib.sha256(carried).hexdigest()}" == layer.diff_id
    assert len(carried) == layer.size
    with tarfile.open(fileobj=io.BytesIO(carried)) as inner:
        assert "etc/new.conf" in inner.getnames()
