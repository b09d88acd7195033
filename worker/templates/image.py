"""A built template's image: the base's layers plus one, loaded, tagged and pushed (25.2).

The image is assembled the way ``docker commit`` would: the base image's
configuration (its environment amended by the template's ``env`` steps) with
the build's layer (``worker.templates.layer``) appended to the base's layers.
It is handed to the engine as a ``docker save`` archive that carries only the
new layer: the engine already holds the base's layers (the build sandbox ran
on them), and ``docker load`` reads a layer's file only when it lacks the
layer. The image is then pushed to the grid's registry, whose manifest digest
is what the template's type names.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

from worker.templates.layer import Layer

__all__ = ["image_config", "load_archive"]


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


def load_archive(config: dict[str, Any], layer: Layer, tag: str, out: Path) -> Path:
    """Write the ``docker load`` archive of the image: manifest, config, the new layer only.

    The base's layers are named in the manifest (``<diff id>/layer.tar``) but not
    carried: the engine has them and does not read them.
    """
    raw = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(raw).hexdigest() + ".json"
    layers = [f"{d.split(':', 1)[1]}/layer.tar" for d in config["rootfs"]["diff_ids"]]
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": layers}]
    with tarfile.open(out, "w:") as tar:
        _add(tar, config_name, raw)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
        tar.add(layer.path, arcname=layers[-1])
    return out


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))
