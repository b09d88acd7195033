"""``sandgrid sessions`` lifecycle commands: checkpoint, checkpoints, restore, pause, find.

sandgrid sessions checkpoint s-... before-refactor
sandgrid sessions restore s-... before-refactor
sandgrid sessions pause s-...
sandgrid sessions fork --count 4 --memory s-...
sandgrid sessions find --label team=red --state idle
"""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import readable_errors
from sandgrid.models import SessionState

__all__ = [
    "add_lifecycle_commands",
    "checkpoint",
    "checkpoints",
    "find",
    "fork",
    "pause",
    "restore",
]

_STATES = ["new", "live", "idle", "busy", "lost"]


@click.command(name="checkpoint")
@click.argument("session_id")
@click.argument("name")
@click.option("--memory", is_flag=True, help="keep the running processes too (gVisor types)")
@readable_errors
def checkpoint(session_id: str, name: str, memory: bool) -> None:
    """Save the workspace of SESSION_ID now and keep it as checkpoint NAME."""
    from sandgrid.client import Client

    with Client() as client:
        info = client.checkpoint(session_id, name, memory=memory)
    kept = f", memory {info.memory_bytes} bytes" if info.memory else ""
    Console().print(f"{session_id} checkpoint {info.name} ({info.snapshot}{kept})")


@click.command(name="fork")
@click.argument("session_id")
@click.option("--count", default=1, show_default=True, help="how many new sessions")
@click.option("--memory", is_flag=True, help="with the running processes (gVisor types)")
@readable_errors
def fork(session_id: str, count: int, memory: bool) -> None:
    """Make COUNT new sessions from SESSION_ID (it keeps running); print their ids."""
    from sandgrid.client import Client

    with Client() as client:
        done = client.fork(session_id, count, memory=memory)
    for info in done.sessions:
        Console().print(info.id)
    if memory and not done.memory:
        Console().print(f"memory not copied: {done.memory_reason}")


@click.command(name="checkpoints")
@click.argument("session_id")
@click.option("--delete", "delete", default=None, help="delete this checkpoint instead")
@readable_errors
def checkpoints(session_id: str, delete: str | None) -> None:
    """List the checkpoints of SESSION_ID (or delete one with --delete NAME)."""
    from sandgrid.client import Client

    with Client() as client:
        if delete is not None:
            client.delete_checkpoint(session_id, delete)
            Console().print(f"{session_id} checkpoint {delete} deleted")
            return
        found = client.checkpoints(session_id)
    table = Table("name", "snapshot")
    for c in found:
        table.add_row(c.name, c.snapshot)
    Console().print(table)


@click.command(name="restore")
@click.argument("session_id")
@click.argument("checkpoint_name")
@readable_errors
def restore(session_id: str, checkpoint_name: str) -> None:
    """Roll the workspace of SESSION_ID back to CHECKPOINT_NAME."""
    from sandgrid.client import Client

    with Client() as client:
        done = client.restore(session_id, checkpoint_name)
    Console().print(f"{done.session} restored to {done.checkpoint} ({done.snapshot})")


@click.command(name="pause")
@click.argument("session_id")
@click.option("--memory", is_flag=True, help="save the running processes too (gVisor types)")
@readable_errors
def pause(session_id: str, memory: bool) -> None:
    """Save SESSION_ID's workspace and free its sandbox; its next turn resumes it."""
    from sandgrid.client import Client

    with Client() as client:
        done = client.pause(session_id, memory=memory)
    held = "sandbox released" if done.released else "no sandbox was held"
    line = f"{done.session} paused: {held}, snapshot {done.snapshot or '-'}"
    if done.memory:
        line += f", memory image {done.memory_bytes} bytes"
    elif memory:
        line += f", memory not saved: {done.memory_reason}"
    Console().print(line)


@click.command(name="find")
@click.option("--label", "labels", multiple=True, help="key=value (repeatable; all must match)")
@click.option("--state", type=click.Choice(_STATES), default=None, help="only this state")
@readable_errors
def find(labels: tuple[str, ...], state: SessionState | None) -> None:
    """List your open sessions with the given labels and state."""
    from sandgrid.client import Client

    wanted = dict(item.partition("=")[::2] for item in labels)
    with Client() as client:
        found = client.find_sessions(labels=wanted, state=state)
    table = Table("id", "type", "state", "labels")
    for s in found:
        table.add_row(s.id, s.type, s.state, ",".join(f"{k}={v}" for k, v in s.labels.items()))
    Console().print(table)


def add_lifecycle_commands(group: click.Group) -> None:
    """Add the lifecycle commands to ``sandgrid sessions``."""
    for command in (checkpoint, checkpoints, restore, pause, fork, find):
        group.add_command(command)
