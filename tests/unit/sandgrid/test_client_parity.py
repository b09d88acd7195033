"""Client and AsyncClient (their sessions, streams, terminals) expose the same methods and
signatures."""

from __future__ import annotations

import inspect

import pytest

from sandgrid.client import (
    AsyncClient,
    AsyncSession,
    AsyncTerminal,
    AsyncTurnStream,
    Client,
    Session,
    Terminal,
    TurnStream,
)
from sandgrid.client._pty import TerminalOptions
from sandgrid.client._requests import ExecOptions, OutputOptions, SessionOptions, exec_call


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
        if name not in ("session", "id", "http"):  # http: builds an httpx client, no I/O
            method = getattr(async_, name)  # a coroutine, or an async iterator (audit_records)
            assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name


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


def _methods(cls: type) -> dict[str, list[tuple[str, object, object]]]:
    return {
        name: _params(inspect.signature(member))
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


@pytest.mark.parametrize(
    ("sync", "async_", "only_sync", "renamed"),
    [
        (TurnStream, AsyncTurnStream, set(), {"close": "aclose"}),
        (Terminal, AsyncTerminal, {"read_until"}, {}),
    ],
)
def test_streams_and_terminals_are_twins(
    sync: type, async_: type, only_sync: set[str], renamed: dict[str, str]
) -> None:
    """The handles beside the clients: the same methods (but the differences named here)."""
    s, a = _methods(sync), _methods(async_)
    s = {renamed.get(n, n): p for n, p in s.items() if n not in only_sync}
    assert s == a
    for name in a:
        assert inspect.iscoroutinefunction(getattr(async_, name)), name


def test_the_wide_keywords_are_the_ones_users_pass() -> None:
    """exec, session and pty take their keywords from one ``TypedDict`` each: same names
    as ever, and an unknown one is refused as Python refuses it."""
    keys = OutputOptions.__optional_keys__
    assert keys == {
        "shell",
        "python",
        "env",
        "cwd",
        "stdin",
        "timeout_s",
        "idempotency_key",
        "on_stdout",
        "on_stderr",
    }
    assert ExecOptions.__optional_keys__ == keys - {"on_stdout", "on_stderr"}
    assert SessionOptions.__optional_keys__ == {
        "quotas",
        "env",
        "files",
        "snapshot_policy",
        "labels",
        "fork_from",
        "network",
        "on_idle",
    }
    assert TerminalOptions.__optional_keys__ == {"rows", "cols", "term", "idle_s", "max_s"}
    with pytest.raises(TypeError, match="unexpected keyword argument 'shel'"):
        exec_call("s-1", shel="true")  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", [Client, AsyncClient, Session, AsyncSession])
def test_network_methods_on_every_shell(cls: type) -> None:
    """23.17: ``session(network=...)``, ``network()`` and ``set_network()`` on all four."""
    methods = _public(cls)
    assert {"network", "set_network"} <= set(methods)
    first = "session_id" if cls in (Client, AsyncClient) else None
    names = [p.name for p in methods["set_network"].parameters.values()][1:]
    assert names == ([first] if first else []) + ["policy"]
    assert "limit" in methods["network"].parameters
