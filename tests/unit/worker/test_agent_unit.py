"""The in-sandbox agent's pure parts, imported from its file (it is never a package import)."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from types import ModuleType

import pytest

from worker.agent import AGENT_PATH
from worker.protocol import compact_json


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sandgrid_agent", AGENT_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


ROOTS = ("/workspace", "/home/sandbox")


@pytest.mark.parametrize(
    ("info", "why"),
    [
        (member("/workspace/x"), "absolute"),
        (member("workspace/../etc/x"), "'..'"),
        (member("etc/passwd"), "outside"),
        (member("workspace/d", tarfile.CHRTYPE), "only regular files"),
        (member("workspace/h", tarfile.LNKTYPE, "workspace/x"), "only regular files"),
        (member("workspace/f", tarfile.FIFOTYPE), "only regular files"),
    ],
)
def test_unpack_members_refused(agent: ModuleType, info: tarfile.TarInfo, why: str) -> None:
    with pytest.raises(agent.AgentError) as err:
        agent.member_target(info, "/", ROOTS)
    assert err.value.code == "invalid_input" and why in err.value.message
    assert err.value.context["member"] == info.name


def test_unpack_members_accepted(agent: ModuleType) -> None:
    assert agent.member_target(member("workspace/a/b"), "/", ROOTS) == "/workspace/a/b"
    link = member("home/sandbox/l", tarfile.SYMTYPE, "../../workspace/a")
    assert agent.member_target(link, "/", ROOTS) == "/home/sandbox/l"
    for target in ("/etc", "../../etc", "/usr/bin/python3"):  # a link's target is data
        out = member("workspace/l", tarfile.SYMTYPE, target)
        assert agent.member_target(out, "/", ROOTS) == "/workspace/l"
    assert (
        agent.member_target(member("x/y"), "/workspace/up", ("/workspace",)) == "/workspace/up/x/y"
    )


def test_output_keeps_cap_and_drains(agent: ModuleType) -> None:
    out = agent.Output("stdout", 10, 1, False)
    for _ in range(1000):
        out.feed(b"0123456789abcdef")
    assert bytes(out.data) == b"0123456789" and out.truncated
    exact = agent.Output("stdout", 4, 1, False)
    exact.feed(b"abcd")
    assert not exact.truncated and exact.text() == "abcd"


def test_output_decodes_with_replacement(agent: ModuleType) -> None:
    out = agent.Output("stderr", 100, 1, False)
    out.feed("é".encode()[:1])
    assert out.text() == "\ufffd"


def test_inside(agent: ModuleType) -> None:
    assert agent.inside("/workspace", ROOTS) and agent.inside("/workspace/a", ROOTS)
    assert not agent.inside("/workspacefoo", ROOTS) and not agent.inside("/etc", ROOTS)


def test_field_validation(agent: ModuleType) -> None:
    with pytest.raises(agent.AgentError):
        agent.need({"timeout": True}, "timeout", (int, float))
    with pytest.raises(agent.AgentError):
        agent.need({}, "argv", list)
    assert agent.need({"timeout": 1.5}, "timeout", (int, float)) == 1.5


def test_unknown_op_and_bad_request(agent: ModuleType) -> None:
    reply = agent.handle({"id": 3, "op": "nope"})
    assert reply["id"] == 3 and not reply["ok"] and reply["error"]["code"] == "invalid_input"
    assert agent.handle({"id": 4, "op": "ping"})["result"]["version"] == 1
    assert agent.handle({"op": "_too_large"})["error"]["code"] == "payload_too_large"


def test_tar_of_data_rejects_garbage(agent: ModuleType) -> None:
    with pytest.raises(agent.AgentError):
        agent.extract(b"not a tar at all" * 100, "/workspace", ("/workspace",))
    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    assert agent.extract(empty.getvalue(), "/nonexistent-root", ("/nonexistent-root",)) == 0


@pytest.mark.parametrize("text", ["plain", "é 😀", "\x01 \\u0041", "A" * 100_000])
def test_replies_are_framed_as_the_worker_frames_requests(agent: ModuleType, text: str) -> None:
    obj = {"id": 1, "ok": True, "result": {"data_b64": text, "é": [text]}}
    assert agent.compact_json(obj) == compact_json(obj)
