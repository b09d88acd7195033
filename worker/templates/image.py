"""A built template's image: the base's layers plus one, loaded, tagged and pushed (25.2).

The image is assembled the way ``docker commit`` would: the base image's
configuration (its environment amended by the template's ``env`` steps) with
the build's layer (``worker.templates.layer``) appended to the base's layers.
It is handed to the engine as a ``docker save`` archive that carries only the
new layer: the engine already holds the base's layers (the build sandbox ran
on them), and ``docker load`` reads a layer's file only when it lacks the
layer. The new layer is written straight into that archive, first, as it is
read out of the sandbox: one write of its bytes, no copy. The image is then
pushed to the grid's registry, whose manifest digest is what the template's
type names.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from worker.templates.layer import Layer

__all__ = ["LAYER", "LAYER_OFFSET", "finish_archive", "image_config", "write_layer"]

#: The build's layer in the load archive (any path will do: the manifest names it).
LAYER = "layer.tar"
#: Where the layer's bytes begin in the archive: after its header block.
LAYER_OFFSET = tarfile.BLOCKSIZE


def image_config(base: dict[str, Any], layer: Layer, env: dict[str, str]) -> dict[str, Any]:
    """The new image's configuration: the base's (``docker inspect``) with ``env`` and ``layer``.

    Args:
        base: the base image as the engine's inspect answers it.
        layer: the build's layer.
        env: the variables the template's ``env`` steps set, in order.
    """
    config = dict(base.get("Config") or {})
    merged = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    merged.update(env)
    config["Env"] = [f"{k}={v}" for k, v in merged.items()]
    diff_ids = [*((base.get("RootFS") or {}).get("Layers") or []), layer.diff_id]
    return {
        "architecture": base.get("Architecture", "amd64"),
        "os": base.get("Os", "linux"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }


def write_layer(out: Path, fill: Callable[[IO[bytes]], Layer]) -> Layer:
    """Begin the ``docker load`` archive ``out`` with the build's layer, written by ``fill``.

    The layer is the archive's first member (``layer.tar``), written in place: its
    header, which needs its size, goes into the block kept for it at the start once
    ``fill`` is done. No copy of the layer is made. ``finish_archive`` adds the rest.
    """
    with out.open("wb") as f:
        f.seek(LAYER_OFFSET)
        layer = fill(f)
        f.write(b"\0" * (-layer.size % tarfile.BLOCKSIZE))
        f.seek(0)
        info = tarfile.TarInfo(LAYER)
        info.size, info.mode, info.mtime = layer.size, 0o644, int(time.time())
        f.write(info.tobuf(format=tarfile.USTAR_FORMAT))
    return layer


def finish_archive(config: dict[str, Any], tag: str, out: Path) -> Path:
    """End the archive ``write_layer`` began: config and manifest after the new layer.

    The base's layers are named in the manifest (``<diff id>/layer.tar``) but not
    carried: the engine has them and does not read them.
    """
    raw = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(raw).hexdigest() + ".json"
    base = config["rootfs"]["diff_ids"][:-1]
    layers = [*(f"{d.split(':', 1)[1]}/layer.tar" for d in base), LAYER]
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": layers}]
    with out.open("r+b") as f:
        f.seek(0, io.SEEK_END)
        with tarfile.open(fileobj=f, mode="w:") as tar:  # appends from here: f.tell()
            _add(tar, config_name, raw)
            _add(tar, "manifest.json", json.dumps(manifest).encode())
    return out


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
