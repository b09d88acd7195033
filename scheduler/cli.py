"""The ``sandgrid`` command: serve the API, run a worker, use the grid from a shell.

    sandgrid serve                                  # API on 127.0.0.1:8700
    sandgrid worker --types python --node w1        # a worker node (worker.main)
    sandgrid tenants add acme                       # prints a new token, once
    sandgrid exec --type python -- python3 -c 'print(1)'
    sandgrid sessions ls | sandgrid sessions close ID

A ``SandgridError`` prints its code and message and exits 1, never a traceback.
Other groups (``batch``, ``bench``) attach to ``main`` with ``main.add_command``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scheduler.errors import SandgridError
from scheduler.settings import get_settings

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])
err_console = Console(stderr=True)
#: Exit status of ``sandgrid exec`` when the command hit its deadline (as timeout(1)).
EXIT_TIMEOUT = 124


def readable_errors(fn: F) -> F:
    """Print a ``SandgridError`` as ``error[code]: message`` and exit 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SandgridError as exc:
            where = escape(f"[{exc.code}]")
            err_console.print(
                f"[red]error{where}[/red]: {escape(exc.message)}", highlight=False, soft_wrap=True
            )
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """sandgrid: a distributed execution grid for AI agents."""


@main.command()
@click.option("--host", default=None, help="bind address [SANDGRID_API_HOST, 127.0.0.1]")
@click.option("--port", type=int, default=None, help="port [SANDGRID_API_PORT, 8700]")
@click.option("--access-log/--no-access-log", default=False, help="log every request")
@click.option("--log-level", default="info", show_default=True)
def serve(host: str | None, port: int | None, access_log: bool, log_level: str) -> None:
    """Serve the HTTP API (OpenAPI at /docs)."""
    import uvicorn

    settings = get_settings()
    uvicorn.run(
        "scheduler.api:create_app",
        factory=True,
        host=host or settings.api_host,
        port=port or settings.api_port,
        access_log=access_log,
        log_level=log_level,
    )


@main.command()
@click.option("--types", default="python", show_default=True, help="sandbox types, comma-separated")
@click.option("--concurrency", type=int, default=4, show_default=True, help="turns at once")
@click.option("--node", default=None, help="node name, unique in the grid [host name]")
@readable_errors
def worker(types: str, concurrency: int, node: str | None) -> None:
    """Run a worker node consuming its direct queue and the types' shared queues."""
    import importlib
    import socket

    # Imported by name: the control plane never depends on the data plane's code.
    try:
        run_worker = importlib.import_module("worker.main").run_worker
    except (ImportError, AttributeError) as exc:
        raise click.ClickException(f"the worker is not installed here: {exc}") from exc
    names = [t.strip() for t in types.split(",") if t.strip()]
    run_worker(types=names, concurrency=concurrency, node=node or socket.gethostname())


@main.command(name="exec", context_settings={"ignore_unknown_options": True})
@click.option("--type", "type_", default="python", show_default=True, help="sandbox type")
@click.option("--timeout", type=float, default=None, help="deadline in seconds")
@click.option("--shell", "use_shell", is_flag=True, help="run the words as one shell command")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
@readable_errors
def exec_(type_: str, timeout: float | None, use_shell: bool, argv: tuple[str, ...]) -> None:
    """One-shot: create a session, run ARGV, print its output, close, exit with its code."""
    from scheduler.client import Client

    with Client() as client, client.session(type=type_) as session:
        if use_shell:
            result = session.exec(shell=" ".join(argv), timeout_s=timeout)
        else:
            result = session.exec(list(argv), timeout_s=timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    for flag, note in (
        (result.stdout_truncated or result.stderr_truncated, "output truncated"),
        (result.oom_killed, "killed: out of memory"),
    ):
        if flag:
            err_console.print(f"[yellow]sandgrid: {note}[/yellow]")
    if result.timed_out:
        err_console.print("[yellow]sandgrid: deadline reached, command killed[/yellow]")
        sys.exit(EXIT_TIMEOUT)
    sys.exit(result.exit_code if result.exit_code is not None else 1)


@main.group()
def sessions() -> None:
    """List and close your sessions."""


@sessions.command(name="ls")
@readable_errors
def sessions_ls() -> None:
    """List your sessions that are not closed."""
    from scheduler.client import Client

    with Client() as client:
        found = client.list_sessions()
    table = Table("id", "type", "state", "owner", "turns", "last used")
    for s in found:
        last = s.last_used.strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(s.id, s.type, s.state, s.owner or "-", str(s.turns), last)
    Console().print(table)


@sessions.command(name="close")
@click.argument("session_id")
@readable_errors
def sessions_close(session_id: str) -> None:
    """Close a session; its container is destroyed."""
    from scheduler.client import Client

    with Client() as client:
        info = client.close_session(session_id)
    Console().print(f"{info.id} {info.state}")


@main.group()
def tenants() -> None:
    """Manage tenants and their tokens (in Redis)."""


@tenants.command(name="add")
@click.argument("name")
@click.option("--max-sessions", type=int, default=None, help="live sessions ceiling")
@click.option("--max-turns", type=int, default=None, help="concurrent turns ceiling")
@readable_errors
def tenants_add(name: str, max_sessions: int | None, max_turns: int | None) -> None:
    """Add a token for tenant NAME and print it (shown only this once)."""
    import redis
    from pydantic import ValidationError

    from scheduler.errors import InvalidInput
    from scheduler.tenants import TenantLimits, TenantStore

    settings = get_settings()
    given: dict[str, int] = {}
    if max_sessions is not None:
        given["max_sessions"] = max_sessions
    if max_turns is not None:
        given["max_concurrent_turns"] = max_turns
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    try:
        token = TenantStore(client).add(name, TenantLimits.model_validate(given))
    except ValidationError as exc:
        raise InvalidInput(f"tenant {name!r}: {exc.errors()[0]['msg']}") from exc
    except redis.RedisError as exc:
        raise SandgridError(f"Redis at {settings.redis_url} unreachable: {exc}") from exc
    click.echo(token)
    err_console.print(f"tenant {name!r}: token above; export SANDGRID_TOKEN=<token>. Keep it.")


@tenants.command(name="ls")
@readable_errors
def tenants_ls() -> None:
    """List tenants (never tokens)."""
    import redis

    from scheduler.tenants import TenantStore

    settings = get_settings()
    client = redis.Redis.from_url(settings.redis_url, decode_responses=True)
    store = TenantStore(client, tenants_file=settings.tenants_file)
    table = Table("tenant", "max sessions", "max turns")
    for t in store.tenants():
        table.add_row(t.name, str(t.limits.max_sessions), str(t.limits.max_concurrent_turns))
    Console().print(table)


if __name__ == "__main__":  # pragma: no cover
    main()


def _attach_groups() -> None:
    """The ``batch`` and ``bench`` groups live in their own modules."""
    from scheduler.cli_batch import batch
    from scheduler.cli_bench import bench

    main.add_command(batch)
    main.add_command(bench)


_attach_groups()
