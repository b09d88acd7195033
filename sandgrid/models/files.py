"""Files of the workspace as the API carries them: one to write, one read, a listing."""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import Field, model_validator

from sandgrid.models.base import MAX_FILE_BYTES, WireModel, WorkspacePath

__all__ = ["FileEntry", "FileList", "FileRead", "FileWrite"]


class FileWrite(WireModel):
    """One file to write in the workspace."""

    path: WorkspacePath
    content: str = Field("", max_length=MAX_FILE_BYTES * 2)
    encoding: Literal["utf-8", "base64"] = "utf-8"
    mode: int = Field(0o644, ge=0, le=0o777)

    @model_validator(mode="after")
    def _base64_content(self) -> FileWrite:
        """Content said to be base64 must decode, so a bad file is refused here, not mid-turn."""
        if self.encoding == "base64":
            try:
                base64.b64decode(self.content, validate=True)
            except ValueError:  # binascii.Error, or a character outside ASCII
                raise ValueError(
                    "content is not valid base64 (encoding is base64): only A-Z, a-z, 0-9, "
                    "+, / and = padding, in groups of 4"
                ) from None
        return self


class FileEntry(WireModel):
    path: WorkspacePath
    type: Literal["file", "dir", "symlink", "other"]
    size: int = 0
    mode: int = 0
    mtime: float = 0.0


class FileList(WireModel):
    entries: list[FileEntry]
    kind: Literal["list"] = Field("list", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""


class FileRead(WireModel):
    path: WorkspacePath
    content: str
    encoding: Literal["utf-8", "base64"]
    size: int
    kind: Literal["read"] = Field("read", exclude=True, repr=False)
    """The tag of the turn's result union (``sandgrid.wire.jobs.TurnResult``); never in a body."""
