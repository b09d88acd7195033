"""A small checkpoint directory as runsc writes one, for the memory store's unit tests."""

from __future__ import annotations

from pathlib import Path

__all__ = ["memory_image"]


def memory_image(tmp_path: Path) -> Path:
    """``tmp_path/image`` with a kernel state file (one chunk) and pages (two chunks)."""
    image = tmp_path / "image"
    image.mkdir()
    (image / "checkpoint.img").write_bytes(b"kernel" * 1000)
    (image / "pages.img").write_bytes(bytes(range(256)) * 40_000)
    return image
