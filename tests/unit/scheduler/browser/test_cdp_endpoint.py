"""The browser type's pure pieces: the DevTools answer over a socket, its path, the heap cap."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from sandgrid.errors import PortUnreachable
from sandgrid.wire.browser import BROWSER_TYPE, CDP_PORT, is_browser_type
from sandgrid.wire.catalog import get_type
from scheduler.browser.cdp import browser_path, json_version
from scheduler.browser.launch import heap_mb
from scheduler.browser.tools import MAX_SNAPSHOT_LINES, render_tree

VERSION = {
    "Browser": "Chrome/150.0",
    "webSocketDebuggerUrl": f"ws://127.0.0.1:{CDP_PORT}/devtools/browser/abc-123",
}


def _answer(payload: bytes, *, close: bool) -> dict[str, object]:
    """json_version over a socket pair whose far end answers ``payload`` (and stays open)."""
    near, far = socket.socketpair()
    near.setblocking(False)

    async def main() -> dict[str, object]:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(json_version(near, CDP_PORT, timeout=2.0))
        request = await loop.run_in_executor(None, far.recv, 4096)
        assert request.startswith(b"GET /json/version HTTP/1.1\r\n")
        assert f"Host: 127.0.0.1:{CDP_PORT}".encode() in request
        far.sendall(payload)
        if close:
            far.close()
        return await task

    try:
        return asyncio.run(main())
    finally:
        far.close()


def test_the_answer_is_read_by_its_length_though_chromium_keeps_the_connection() -> None:
    body = json.dumps(VERSION).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    assert _answer(head + body, close=False) == VERSION


def test_not_a_devtools_answer_is_port_unreachable() -> None:
    with pytest.raises(PortUnreachable, match="not a DevTools answer"):
        _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", close=True)
    with pytest.raises(PortUnreachable):
        _answer(b"HTTP/1.1 200 OK\r\n\r\n", close=False)  # never complete: the deadline


def test_browser_path_and_type() -> None:
    assert browser_path(VERSION) == "/devtools/browser/abc-123"
    assert is_browser_type(BROWSER_TYPE) and not is_browser_type("python")
    assert get_type(BROWSER_TYPE).runtime == "runsc"  # gVisor by default


def test_each_pages_heap_is_a_quarter_of_the_session_memory() -> None:
    assert heap_mb(1024) == 256 and heap_mb(512) == 128 and heap_mb(64) == 32


def test_the_snapshot_skips_ignored_and_unnamed_generic_nodes_and_keeps_refs() -> None:
    nodes = [
        {"nodeId": "1", "role": {"value": "RootWebArea"}, "name": {"value": "T"},
         "childIds": ["2", "5"], "backendDOMNodeId": 1},
        {"nodeId": "2", "role": {"value": "generic"}, "childIds": ["3"], "backendDOMNodeId": 7},
        {"nodeId": "3", "role": {"value": "heading"}, "name": {"value": "Sign up"},
         "childIds": [], "backendDOMNodeId": 9},
        {"nodeId": "5", "ignored": True, "role": {"value": "none"}, "childIds": ["6"]},
        {"nodeId": "6", "role": {"value": "textbox"}, "name": {"value": "Name"},
         "backendDOMNodeId": 12},
    ]  # fmt: skip
    assert render_tree(nodes) == [
        '- RootWebArea "T" [ref=e1]',
        '  - heading "Sign up" [ref=e9]',
        '  - textbox "Name" [ref=e12]',
    ]


def test_a_huge_tree_is_cut_and_says_so() -> None:
    many = [{"nodeId": str(i), "role": {"value": "link"}, "name": {"value": f"n{i}"},
             "childIds": [str(i + 1)] if i < MAX_SNAPSHOT_LINES + 50 else []}
            for i in range(MAX_SNAPSHOT_LINES + 51)]  # fmt: skip
    lines = render_tree(many)
    assert len(lines) == MAX_SNAPSHOT_LINES + 1 and lines[-1].startswith("... (cut at")
