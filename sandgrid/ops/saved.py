"""What a mutating op's result says about its snapshot, and the bare body of a small result.

A turn that ran but whose snapshot failed is still a result (``worker.turns.snapshot_policy``):
``saved`` is False and ``saved_error`` says why. ``ExecResult`` and ``CodeResult``
declare the two fields themselves; the other mutating ops' results inherit them here.

The routes of the small results (``{"written": 2}``, ``{"deleted": 1}``,
``{"files": 3}``) have always answered bare objects, and the SDK hands those
dicts to its callers as they are: ``bare_body`` keeps them so.
"""

from __future__ import annotations

from typing import Any

from sandgrid.models import SaveError, WireModel

__all__ = ["SavedResult", "bare_body"]


class SavedResult(WireModel):
    """Base of a mutating op's result: whether its workspace was saved after it."""

    saved: bool = True
    saved_error: SaveError | None = None


def bare_body(result: WireModel) -> dict[str, Any]:
    """The result's fields that differ from their defaults, as JSON.

    No ``v``, and ``saved``/``saved_error`` (without their own ``v``) only when
    the snapshot after the op failed: the bodies these routes always answered.
    """
    body: dict[str, Any] = result.model_dump(mode="json", exclude_defaults=True)
    return body
