"""``sandgrid audit``: the caller's tenant's audit trail, as a table or JSON lines.

sandgrid audit --since 1h                      # newest first
sandgrid audit --session s-abc --order asc --json | jq .command_head
"""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from typing import Literal

import click
from rich.console import Console
from rich.table import Table

from sandgrid.cli.helpers import readable_errors
from sandgrid.errors import InvalidInput

__all__ = ["audit", "parse_since"]

_AGO = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str, now: float | None = None) -> float:
    """``--since`` as epoch seconds: ``90s``/``15m``/``2h``/``7d`` ago, an ISO time, or epoch.

    Raises:
        InvalidInput: none of those forms.
    """
    now = time.time() if now is None else now
    found = _AGO.match(text.strip())
    if found:
        return now - float(found[1]) * _UNIT_S[found[2]]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(
            f"since: {text!r} is not a duration (15m, 2h, 7d), an ISO time or epoch seconds",
            context={"field": "since", "rule": "<n>[smhd] | ISO 8601 | epoch seconds"},
        ) from exc
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


@click.command()
@click.option("--session", default=None, help="only this session's records")
@click.option("--since", default=None, help="15m, 2h, 7d ago; an ISO time; or epoch seconds")
@click.option("--limit", type=int, default=None, help="records at most (server default 1000)")
@click.option("--action", default=None, help="only records of this action (exec, network...)")
@click.option(
    "--order",
    type=click.Choice(["desc", "asc"]),
    default=None,
    help="desc: newest first (the default); asc: oldest first",
)
@click.option("--cursor", default=None, help="the next page: the cursor the last one printed")
@click.option("--json", "as_json", is_flag=True, help="one JSON record per line")
@readable_errors
def audit(
    session: str | None,
    since: str | None,
    limit: int | None,
    action: str | None,
    order: Literal["asc", "desc"] | None,
    cursor: str | None,
    as_json: bool,
) -> None:
    """The audit trail of your tenant: sessions, code, files, terminals, network."""
    from sandgrid.client import Client

    with Client() as client:
        page = client.audit(
            session=session,
            since=parse_since(since) if since else None,
            limit=limit,
            action=action,
            order=order,
            cursor=cursor,
        )
    if as_json:
        for rec in page.records:
            sys.stdout.write(rec.model_dump_json() + "\n")
    else:
        table = Table("time (UTC)", "session", "action", "outcome", "exit", "ms", "command")
        for rec in page.records:
            stamp = datetime.fromtimestamp(rec.ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
            exit_code = "" if rec.exit_code is None else str(rec.exit_code)
            ms = "" if rec.duration_ms is None else f"{rec.duration_ms:.0f}"
            cmd = rec.command_head or (rec.command_digest or "")[:19]
            table.add_row(stamp, rec.session, rec.action, rec.outcome, exit_code, ms, cmd)
        Console(soft_wrap=True).print(table)
    if page.next_cursor:
        click.echo(f"more records: ask again with --cursor {page.next_cursor}", err=True)
