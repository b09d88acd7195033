"""The OpenAI Agents SDK provider's PTY processes and persisted tars, without a grid.

Fakes stand in for the background processes and the terminal; the same checks
against the real grid are in ``tests/integration/test_openai_agents_sdk_suite.py``.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from typing import Any

import pytest
from agents.sandbox.session.pty_types import PTY_PROCESSES_MAX

from sandgrid.errors import LimitExceeded
from sandgrid.integrations.openai_agents.pty import BackgroundPty
from sandgrid.integrations.openai_agents.pty_entries import (
    PipeProcess,
    TerminalProcess,
    hold_back,
)
from sandgrid.integrations.openai_agents.tars import relative_link, workspace_tar
from sandgrid.processes import ProcessInfo, ProcessLogs


class FakeProc:
    """A background process whose log is a byte string the test grows."""

    def __init__(self, log: bytes = b"", running: bool = True) -> None:
        self.log, self.running, self.killed = log, running, False

    async def wait(self, timeout: float | None = None) -> ProcessInfo:
        return ProcessInfo(
            pid=1, argv=[], running=self.running, exit_code=None if self.running else 0,
            started_at=0.0,
        )  # fmt: skip

    async def logs(self, since: int = 0) -> ProcessLogs:
        data = self.log[since:]
        return ProcessLogs(
            pid=1, data=data.decode("utf-8", errors="replace"), since=since,
            offset=len(self.log), end=len(self.log), running=self.running,
        )  # fmt: skip

    async def kill(self, signal: str = "TERM") -> None:
        self.killed = True


class FakeClient:
    """``start_process`` of the grid, refusing past ``limit`` running processes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.procs: list[FakeProc] = []

    async def start_process(self, sid: str, argv: Any = None, **kw: Any) -> FakeProc:
        if sum(not p.killed for p in self.procs) >= self.limit:
            raise LimitExceeded("8 background processes are running")
        self.procs.append(FakeProc())
        return self.procs[-1]


class Session(BackgroundPty):
    def __init__(self, client: FakeClient) -> None:
        self._client = client  # type: ignore[assignment]

    @property
    def sandgrid_session_id(self) -> str:
        return "s-0000000000000000"


def test_a_split_utf8_character_is_read_whole() -> None:
    euro = "€".encode()
    assert hold_back((b"ab" + euro[:2]).decode(errors="replace"), 4) == 2
    assert hold_back("ab", 2) == 0
    assert hold_back("\ufffdab\ufffd", 6) == 0  # other bad bytes: no guess
    proc = FakeProc(b"ab" + euro[:2])
    entry = PipeProcess(proc)  # type: ignore[arg-type]
    first = asyncio.run(entry.poll(0))
    proc.log += euro[2:] + b"c"
    second = asyncio.run(entry.poll(0))
    assert (first.data, second.data) == (b"ab", euro + b"c")


def test_the_ninth_process_drops_the_least_recent_one() -> None:
    client = FakeClient(limit=8)
    s = Session(client)
    started = [asyncio.run(s.pty_exec_start("sleep 60", yield_time_s=0)) for _ in range(9)]
    assert all(u.process_id is not None for u in started)
    assert client.procs[0].killed and not any(p.killed for p in client.procs[1:])
    assert len(s._ptys) == 8 and started[0].process_id not in s._ptys


def test_the_sdk_limit_of_64_drops_one_as_the_sdk_chooses() -> None:
    client = FakeClient(limit=1000)
    s = Session(client)
    for _ in range(PTY_PROCESSES_MAX + 1):
        asyncio.run(s.pty_exec_start("sleep 60", yield_time_s=0))
    assert len(s._ptys) == PTY_PROCESSES_MAX and client.procs[0].killed


def test_max_output_tokens_cuts_as_the_sdk_does() -> None:
    client = FakeClient(limit=8)
    s = Session(client)
    update = asyncio.run(s.pty_exec_start("yes", yield_time_s=0))
    assert update.process_id is not None
    client.procs[0].log = b"word " * 20_000
    cut = asyncio.run(s.pty_write_stdin(session_id=update.process_id, chars="", yield_time_s=0))
    assert cut.original_token_count is None or cut.original_token_count > 0
    client.procs[0].log += b"more " * 20_000
    small = asyncio.run(
        s.pty_write_stdin(
            session_id=update.process_id, chars="", yield_time_s=0, max_output_tokens=50
        )
    )
    assert small.original_token_count is not None and small.original_token_count > 50
    assert len(small.output) < 1000


class FakeTerm:
    """The grid's terminal: frames the test queues, what was typed."""

    def __init__(self, frames: list[str | None]) -> None:
        self.frames, self.closed = frames, False
        self.typed: list[str] = []
        self.exit_code: int | None = None
        self.ended = False

    async def recv(self, timeout: float | None = None) -> str | None:
        while not self.frames and not self.ended:
            await asyncio.sleep(0.01)
        if self.ended:
            return None  # as the real terminal: None ever after its end
        frame = self.frames.pop(0)
        self.ended = frame is None
        return frame

    async def send(self, data: str) -> None:
        self.typed.append(data)

    async def close(self) -> None:
        self.closed = True


def test_the_terminal_drops_the_prompt_and_reads_the_exit_code() -> None:
    async def main() -> tuple[bytes, int | None, bool]:
        term = FakeTerm(["$ printf '\\036sg-start\\036'...\r\n\x1esg-st", "art\x1ehi\r\n", "\x1e"])
        entry = TerminalProcess(term)  # type: ignore[arg-type]
        first = await entry.poll(0.2)
        assert first.exit_code is None and first.data == b"hi\r\n"  # the "\x1e" waits
        term.frames += ["sg-exit 130\x1e", None]
        last = await entry.poll(1)
        await entry.kill()
        return last.data, last.exit_code, term.closed

    assert asyncio.run(main()) == (b"", 130, True)


def test_absolute_links_into_the_workspace_become_relative() -> None:
    assert relative_link("l", "/workspace/src/app.py") == "src/app.py"
    assert relative_link("a/b/l", "/workspace/src/app.py") == "../../src/app.py"
    assert relative_link("l", "/workspace") == "."
    assert relative_link("l", "/etc/passwd") == "/etc/passwd"  # never pointed inside
    assert relative_link("l", "src/app.py") == "src/app.py"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        link = tarfile.TarInfo("d/l")
        link.type, link.linkname = tarfile.SYMTYPE, "/workspace/x.txt"
        t.addfile(link)
    with tarfile.open(fileobj=io.BytesIO(workspace_tar(buf.getvalue(), set()))) as t:
        assert t.getmember("d/l").linkname == "../x.txt"


@pytest.mark.parametrize("chars", ["", "x"])
def test_an_unknown_process_is_the_sdks_error(chars: str) -> None:
    from agents.sandbox.errors import PtySessionNotFoundError

    with pytest.raises(PtySessionNotFoundError):
        asyncio.run(Session(FakeClient(1)).pty_write_stdin(session_id=7, chars=chars))


def test_a_busy_refusal_is_tried_again_only_just_after_a_terminal_ended() -> None:
    from sandgrid.errors import Conflict

    s = Session(FakeClient(1))
    tries: list[int] = []

    async def busy_once() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise Conflict("busy with another turn")
        return "ran"

    with pytest.raises(Conflict):  # no terminal ended: a 409 is the caller's
        asyncio.run(s._grid(busy_once))
    tries.clear()

    async def end_a_terminal() -> None:
        await s._end(TerminalProcess(FakeTerm([None])))  # type: ignore[arg-type]

    asyncio.run(end_a_terminal())
    assert asyncio.run(s._grid(busy_once)) == "ran" and len(tries) == 2
