"""The two kinds of PTY process behind the SDK's PTY methods, with one interface.

``PipeProcess``: a background process of the session (pipes, no terminal),
read from its absolute output offset. The grid hands its output as text, so a
UTF-8 character whose bytes straddle two reads would become U+FFFD twice; a
read that ends in an incomplete character is cut before it and the next read
starts at its first byte (``hold_back``). Bytes that are not UTF-8 at all stay
replaced: the grid's process logs have no bytes field.

``TerminalProcess``: ``tty=True``, the command on the grid's terminal
(``WS /v1/sessions/{id}/pty``): a login shell on a real pseudo-terminal, so
Ctrl-C (``\\x03``) is SIGINT to the command, as the SDK's shell instructions
tell the model. The provider types one line into that shell, which replaces it
(``exec``) with a small ``sh`` wrapper: print a start marker, run the command
with ``sh -c``, print an end marker with its status (130 after Ctrl-C).
What comes before the start marker (the prompt, the echoed line) is dropped;
the end marker gives the exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import time
from dataclasses import dataclass, field

from sandgrid.client import AsyncBackgroundProcess, AsyncClient, AsyncTerminal
from sandgrid.errors import SandgridError

__all__ = ["END_MARK", "START_MARK", "PipeProcess", "PtyPoll", "TerminalProcess", "hold_back"]

_LOG_READS = 16
"""Reads of a process's log in one poll at most (each is up to 1 MiB)."""
START_MARK = "\x1esg-start\x1e"
END_MARK = re.compile("\x1esg-exit (\\d+)\x1e")
_WRAPPER = (
    "trap : INT QUIT; printf '\\036sg-start\\036'; sh -c \"$1\"; printf '\\036sg-exit %d\\036' $?"
)
"""What replaces the login shell: the command in ``sh -c`` (Ctrl-C is its SIGINT: it is
in the terminal's foreground group), then its status; the wrapper itself outlives the
SIGINT (a trap, which its child does not inherit) to report it."""
_OPEN_WAIT_S = 30.0
"""How long a terminal may take to show its shell's first output."""
_END_WAIT_S = 30.0
"""How long a hung-up terminal may take to end (the grid saves the workspace first)."""
_MARK_MAX = len("\x1esg-exit 255\x1e") + 1
_REPLACEMENT = "\ufffd"


@dataclass
class PtyPoll:
    """What one poll saw: new output, the exit code once ended, output the grid dropped."""

    data: bytes
    exit_code: int | None
    dropped: int = 0


def hold_back(text: str, nbytes: int) -> int:
    """Bytes at the end of a read of ``nbytes`` to read again: an incomplete UTF-8 character.

    The grid decodes each read with replacement, so a read ending mid-character
    ends in one U+FFFD standing for 1 to 3 bytes. When the rest of the text is
    clean, those bytes are counted exactly and read again next time, whole.
    """
    if not text.endswith(_REPLACEMENT) or _REPLACEMENT in text[:-1]:
        return 0
    extra = nbytes - len(text[:-1].encode())
    return extra if 1 <= extra <= 3 else 0


@dataclass
class PipeProcess:
    """A background process of the session (``tty=False``)."""

    proc: AsyncBackgroundProcess
    offset: int = 0
    last_used: float = field(default_factory=time.monotonic)

    async def send(self, chars: str) -> None:
        await self.proc.send_stdin(chars)

    async def poll(self, wait_s: float) -> PtyPoll:
        """Wait up to ``wait_s`` for the end; the output since the last poll."""
        info = await self.proc.wait(timeout=wait_s)
        chunks: list[str] = []
        dropped = 0
        running = info.running
        for _ in range(_LOG_READS):
            logs = await self.proc.logs(since=self.offset)
            dropped += logs.skipped
            running = running and logs.running
            back = hold_back(logs.data, logs.offset - logs.since - logs.skipped) if running else 0
            chunks.append(logs.data[:-1] if back else logs.data)
            self.offset = logs.offset - back
            if logs.offset >= logs.end:
                break
        data = "".join(chunks).encode()
        if running:
            return PtyPoll(data, None, dropped)
        final = await self.proc.wait(timeout=0)
        code = final.exit_code if final.exit_code is not None else 128 + (final.signal or 9)
        return PtyPoll(data, code, dropped)

    async def kill(self) -> None:
        with contextlib.suppress(SandgridError):
            await self.proc.kill("KILL")


class TerminalProcess:
    """A command on the grid's terminal (``tty=True``); its output pumped in the background."""

    def __init__(self, term: AsyncTerminal) -> None:
        self.term = term
        self.last_used = time.monotonic()
        self._seen = ""
        self._started = False
        self._out = ""
        self._code: int | None = None
        self._ended = asyncio.Event()
        self._error: BaseException | None = None
        self._more = asyncio.Event()
        self._pump = asyncio.create_task(self._run())

    @classmethod
    async def open(cls, client: AsyncClient, session_id: str, line: str) -> TerminalProcess:
        """Open the session's terminal and type ``line`` (a shell command) into it."""
        term = await client.pty(session_id)
        try:  # the first frame: the shell's prompt, or the grid's refusal (busy, unknown)
            first = await term.recv(timeout=_OPEN_WAIT_S)
        except TimeoutError:
            first = ""
        except SandgridError:
            with contextlib.suppress(SandgridError, OSError):
                await term.close()
            raise
        typed = f"exec sh -c {shlex.quote(_WRAPPER)} sg {shlex.quote(line)}\r"
        await term.send(typed)
        proc = cls(term)
        if first:
            proc._feed(first)
        return proc

    async def _run(self) -> None:
        try:
            while (text := await self.term.recv()) is not None:
                self._feed(text)
                if self._code is not None:
                    break
        except (SandgridError, OSError) as exc:
            self._error = exc
        finally:
            self._ended.set()
            self._more.set()

    def _feed(self, text: str) -> None:
        if not self._started:
            self._seen += text
            if START_MARK not in self._seen:
                return
            self._started = True
            text = self._seen.split(START_MARK, 1)[1]
            self._seen = ""
        self._out += text
        if (m := END_MARK.search(self._out)) is not None:
            self._code = int(m.group(1))
            self._out = self._out[: m.start()]
        self._more.set()

    async def send(self, chars: str) -> None:
        await self.term.send(chars)

    async def poll(self, wait_s: float) -> PtyPoll:
        """Wait up to ``wait_s`` for the end; the output since the last poll."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), wait_s)
        if self._error is not None and not self._started:
            raise self._error
        ended = self._ended.is_set()
        keep = 0 if ended else _partial_mark(self._out)
        data, self._out = self._out[: len(self._out) - keep], self._out[len(self._out) - keep :]
        if not ended:
            return PtyPoll(data.encode(), None)
        code = self._code if self._code is not None else self.term.exit_code
        return PtyPoll(data.encode(), code if code is not None else 129)

    async def kill(self) -> None:
        """Hang up (the shell and everything it started are killed), then wait, bounded,
        for the terminal's end: the grid answers it once the turn has let go of the
        session, so the session's next call is not refused as busy."""
        if not self._ended.is_set():
            with contextlib.suppress(SandgridError, OSError):
                await self.term.close()
        with contextlib.suppress(SandgridError, OSError, TimeoutError):
            await asyncio.wait_for(self._drain(), _END_WAIT_S)
        with contextlib.suppress(SandgridError, OSError):
            await self.term.close()

    async def _drain(self) -> None:
        await self._ended.wait()
        while await self.term.recv() is not None:
            pass


def _partial_mark(out: str) -> int:
    """Characters at the end of ``out`` that may be the start of the end marker."""
    cut = out.rfind("\x1e")
    return len(out) - cut if cut >= 0 and len(out) - cut < _MARK_MAX else 0
