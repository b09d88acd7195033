"""Checked extraction: which tar members are refused, and where the others land."""

from __future__ import annotations

import io
import tarfile

import pytest

from worker.agent.errors import AgentError
from worker.agent.limits import ROOTS
from worker.agent.safetar import extract, member_target


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


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
def test_unpack_members_refused(info: tarfile.TarInfo, why: str) -> None:
    with pytest.raises(AgentError) as err:
        member_target(info, "/", ROOTS)
    assert err.value.code == "invalid_input" and why in err.value.message
    assert err.value.context["member"] == info.name


def test_unpack_members_accepted() -> None:
    assert member_target(member("workspace/a/b"), "/", ROOTS) == "/workspace/a/b"
    link = member("home/sandbox/l", tarfile.SYMTYPE, "../../workspace/a")
    assert member_target(link, "/", ROOTS) == "/home/sandbox/l"
    for target in ("/etc", "../../etc", "/usr/bin/python3"):  # a link's target is data
        out = member("workspace/l", tarfile.SYMTYPE, target)
        assert member_target(out, "/", ROOTS) == "/workspace/l"
    assert member_target(member("x/y"), "/workspace/up", ("/workspace",)) == "/workspace/up/x/y"


def test_a_root_itself_can_only_be_a_directory() -> None:
    assert member_target(member("workspace", tarfile.DIRTYPE), "/", ROOTS) == "/workspace"
    for info in (member("workspace"), member("home/sandbox", tarfile.SYMTYPE, "/etc")):
        with pytest.raises(AgentError) as err:
            member_target(info, "/", ROOTS)
        assert "a root can only be a directory" in err.value.message


def test_tar_of_data_rejects_garbage() -> None:
    with pytest.raises(AgentError):
        extract(b"not a tar at all" * 100, "/workspace", ("/workspace",))
    empty = io.BytesIO()
    with tarfile.open(fileobj=empty, mode="w"):
        pass
    assert extract(empty.getvalue(), "/nonexistent-root", ("/nonexistent-root",)) == 0
