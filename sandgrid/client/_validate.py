"""A body the SDK takes as a model or the mapping of its fields, validated before any round trip.

An ``InvalidInput`` names the first field broken and its rule, the way the API's
422 does, so a caller learns of a typo without a request. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sandgrid.errors import InvalidInput

__all__ = ["as_model"]

M = TypeVar("M", bound=BaseModel)


def as_model(model: type[M], definition: M | Mapping[str, Any], operation: str, whole: str) -> M:
    """``definition`` as a validated ``model``.

    Args:
        model: the body's model.
        definition: the model itself, or the mapping of its fields.
        operation: the SDK operation, for the error.
        whole: what the error names when no single field is at fault.

    Raises:
        InvalidInput: a field breaks a rule (named).
    """
    if isinstance(definition, model):
        return definition
    try:
        return model.model_validate(dict(definition))
    except (ValidationError, TypeError, ValueError) as exc:
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        where = ".".join(str(p) for p in errors[0]["loc"]) if errors else whole
        rule = errors[0]["msg"].removeprefix("Value error, ") if errors else str(exc)
        raise InvalidInput(
            f"{where}: {rule}", operation=operation, context={"field": where, "rule": rule}
        ) from None
