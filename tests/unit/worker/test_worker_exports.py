"""Every module of the data plane declares ``__all__`` as exactly its public names.

The rule (what a public name is) is written once, in ``tests/support/exports.py``.
"""

from __future__ import annotations

import pytest

import worker
from tests.support.exports import check_exports, module_params


@pytest.mark.parametrize("name", module_params(worker))
def test_all_is_exactly_the_public_names(name: str) -> None:
    check_exports(name)


def test_backend_is_abstract() -> None:
    """What differs per runtime is the ``Runtime``'s to fill: it cannot be made bare."""
    from worker.runtimes import Runtime

    with pytest.raises(TypeError, match="abstract"):
        Runtime()  # type: ignore[abstract]
