"""Background processes in the agent: the bounded log's offsets, and refusals.

Spawning needs root (processes run as the sandbox user): that part runs in the
contract suite on both runtimes (tests/integration/test_background_contract.py).
"""

from __future__ import annotations

from worker.agent.background import OutputLog
from worker.agent.main import handle


def test_the_log_keeps_the_newest_bytes_with_absolute_offsets() -> None:
    log = OutputLog(cap=10)
    log.append(b"0123456789")
    assert log.read(0, 100) == (b"0123456789", 10, 0)
    log.append(b"abcde")  # five oldest bytes dropped
    assert (log.start, log.end) == (5, 15)
    assert log.read(0, 100) == (b"56789abcde", 15, 5)  # the gap is counted, not hidden
    assert log.read(7, 3) == (b"789", 10, 0)
    assert log.read(10, 100) == (b"abcde", 15, 0)  # from an offset: no duplicate
    assert log.read(15, 100) == (b"", 15, 0)
    assert log.read(99, 100) == (b"", 15, 0)  # past the end: nothing, at the end


def test_reads_that_follow_offset_never_duplicate_or_skip_silently() -> None:
    log, seen, offset, skipped = OutputLog(cap=7), bytearray(), 0, 0
    written = b""
    for i in range(50):
        chunk = str(i).encode() * 3
        log.append(chunk)
        written += chunk
        if i % 4 == 0:
            data, offset, gap = log.read(offset, 5)
            seen += data
            skipped += gap
    data, offset, gap = log.read(offset, 1000)
    seen += data
    skipped += gap
    assert offset == len(written) and len(seen) + skipped == len(written)
    assert bytes(seen).endswith(written[-7:])


def test_unknown_pid_and_bad_fields_are_refused() -> None:
    reply = handle({"id": 1, "op": "proc_logs", "pid": 424242, "since": 0})
    assert reply["error"]["code"] == "not_found" and reply["error"]["context"]["field"] == "pid"
    reply = handle({"id": 2, "op": "proc_wait", "pid": "x", "timeout": 1})
    assert reply["error"]["code"] == "invalid_input" and reply["error"]["context"]["field"] == "pid"
    assert handle({"id": 3, "op": "proc_list"})["result"] == {"processes": []}
