"""How a template build ends failed: the reason, and the step and exit code if a step failed."""

from __future__ import annotations

__all__ = ["BuildFailed"]


class BuildFailed(Exception):
    """The build ends failed: why, and the step and exit code if a step failed."""

    def __init__(self, reason: str, step: int | None = None, exit_code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.step = step
        self.exit_code = exit_code
