"""How one definition of a call serves as a method of both the sync and the async SDK.

A public call is written once, as a pure builder that returns a ``Call``
(``_requests``, ``_files``, ``_batches``, ``_lifecycle``, ``_process_calls``): its
signature and docstring are the method's. The method tables (``BaseClient``, ``SessionHandle``,
``ProcessHandle``) list each builder once, as an ``Op`` (a client's call) or a
``BoundOp`` (a handle's call: the handle's reference goes first). Read from a
sync shell (``SyncShell``) an op is a plain method that sends its call; read from
an async one (``AsyncShell``), a coroutine method that awaits it. So a shell
writes only how a call is sent (``_send``: the I/O), and the few methods whose
I/O is more than one send (streams, terminals, waits).

``inspect`` sees the builder's signature and docstring on both shells (a test
holds them equal), and type checkers see its parameters and result through the
``ParamSpec``.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from sandgrid.client._call import Call

__all__ = [
    "AsyncClosing",
    "AsyncHandle",
    "AsyncShell",
    "BoundOp",
    "Closing",
    "Handle",
    "Op",
    "SyncHandle",
    "SyncShell",
]

P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")
S = TypeVar("S")
_Make = Callable[[Any, tuple[Any, ...], dict[str, Any]], Call[Any]]


class SyncShell:
    """Sends calls and blocks for their answers (``Client``; handles, through it)."""

    def _send(self, call: Call[T]) -> T:
        raise NotImplementedError


class AsyncShell:
    """Sends calls under asyncio (``AsyncClient``; handles, through it)."""

    async def _send(self, call: Call[T]) -> T:
        raise NotImplementedError


class Handle(Generic[S, R]):
    """A handle on a thing of the grid (a session, a process): its calls start with its
    reference ``_ref`` and go through its ``_client``."""

    @property
    def _client(self) -> S:
        raise NotImplementedError

    @property
    def _ref(self) -> R:
        raise NotImplementedError


class SyncHandle(Handle[SyncShell, R], SyncShell):
    """A ``Handle`` over a ``SyncShell``."""

    def _send(self, call: Call[T]) -> T:
        return self._client._send(call)


class AsyncHandle(Handle[AsyncShell, R], AsyncShell):
    """A ``Handle`` over an ``AsyncShell``."""

    async def _send(self, call: Call[T]) -> T:
        return await self._client._send(call)


class Closing:
    """A context manager that ``close()``s its object on exit (clients, sessions,
    terminals, streams)."""

    def close(self) -> object:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClosing:
    """``Closing`` for ``async with``: awaits ``close()`` on exit."""

    async def close(self) -> object:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Method:
    """A descriptor that makes, per class it is read from, a sync or an async method."""

    #: Leading builder parameters the shell fills in (a handle's reference).
    _bound = 0

    def __init__(self, build: Callable[..., Call[Any]]) -> None:
        self._build = build
        self._name = build.__name__
        self._made: dict[type, Callable[..., Any]] = {}

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def _make(self, shell: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call[Any]:
        return self._build(*args, **kwargs)

    def _method(self, owner: type) -> Callable[..., Any]:
        if owner not in self._made:
            method = (_async if issubclass(owner, AsyncShell) else _sync)(self._make)
            method.__name__ = self._name
            method.__qualname__ = f"{owner.__qualname__}.{self._name}"
            method.__module__ = owner.__module__
            method.__doc__ = self._build.__doc__
            method.__signature__ = _signature(self._build, self._bound)  # type: ignore[attr-defined]
            self._made[owner] = method
        return self._made[owner]

    def _get(self, obj: object, owner: type) -> Any:
        method = self._method(owner)
        return method if obj is None else types.MethodType(method, obj)


class Op(_Method, Generic[P, T]):
    """A client's call (``build``'s arguments are the method's) as a method of both shells."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        super().__init__(build)

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, obj: SyncShell, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncShell, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: object, owner: type) -> Any:
        return self._get(obj, owner)


class BoundOp(_Method, Generic[R, P, T]):
    """A handle's call: ``build`` takes the handle's reference first, then the method's
    arguments."""

    _bound = 1

    def __init__(self, build: Callable[Concatenate[R, P], Call[T]]) -> None:
        super().__init__(build)

    def _make(self, shell: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call[Any]:
        return self._build(shell._ref, *args, **kwargs)

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, obj: SyncHandle[R], owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncHandle[R], owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    def __get__(self, obj: object, owner: type) -> Any:
        return self._get(obj, owner)


def _sync(make: _Make) -> Callable[..., Any]:
    def method(self: SyncShell, *args: Any, **kwargs: Any) -> Any:
        return self._send(make(self, args, kwargs))

    return method


def _async(make: _Make) -> Callable[..., Any]:
    async def method(self: AsyncShell, *args: Any, **kwargs: Any) -> Any:
        return await self._send(make(self, args, kwargs))

    return method


def _signature(build: Callable[..., Any], bound: int) -> inspect.Signature:
    """``build``'s signature as a method's: ``self`` for the parameters the shell fills,
    and the call's result (``Call[X]``: ``X``) as what it returns."""
    sig = inspect.signature(build)
    params = list(sig.parameters.values())[bound:]
    returns = sig.return_annotation
    if isinstance(returns, str) and returns.startswith("Call[") and returns.endswith("]"):
        returns = returns[len("Call[") : -1]
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sig.replace(parameters=[this, *params], return_annotation=returns)
