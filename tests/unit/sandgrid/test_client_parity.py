"""Client and AsyncClient (and their sessions) expose the same methods and signatures."""

from __future__ import annotations

import inspect

import pytest

from sandgrid.client import AsyncClient, AsyncSession, Client, Session


def _public(cls: type) -> dict[str, inspect.Signature]:
    out = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") or not callable(member):
            continue
        sig = inspect.signature(member)
        out[name] = sig.replace(return_annotation=inspect.Signature.empty)
    return out


def _params(sig: inspect.Signature) -> list[tuple[str, object, object]]:
    # Annotations of transports differ (sync vs async transport); names, kinds, defaults don't.
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize(("sync", "async_"), [(Client, AsyncClient), (Session, AsyncSession)])
def test_same_public_methods(sync: type, async_: type) -> None:
    s, a = _public(sync), _public(async_)
    assert set(s) == set(a)
    for name in s:
        assert _params(s[name]) == _params(a[name]), name
        if name not in ("session", "id"):
            assert inspect.iscoroutinefunction(getattr(async_, name)), name


def test_same_annotations_except_transport() -> None:
    for sync, async_ in [(Client, AsyncClient), (Session, AsyncSession)]:
        for name, sig in _public(sync).items():
            other = _public(async_)[name]
            for p, q in zip(sig.parameters.values(), other.parameters.values(), strict=True):
                if p.name not in ("transport", "client"):
                    assert p.annotation == q.annotation, (name, p.name)


def test_context_managers() -> None:
    assert hasattr(Client, "__enter__") and hasattr(AsyncClient, "__aenter__")
    assert hasattr(Session, "__exit__") and hasattr(AsyncSession, "__aexit__")
