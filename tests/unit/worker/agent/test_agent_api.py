"""Agent requests from wire models and results from agent replies: pure mapping."""

from __future__ import annotations

import base64
import subprocess

import pytest

from sandgrid.errors import ErrorCode, InvalidInput
from sandgrid.models import ExecRequest, FileWrite, Quotas
from worker.ops.exec import ARG_CHUNK, command_argv, exec_fields, exec_result
from worker.ops.files import check_path, file_list, file_read, write_fields
from worker.sandboxes.files import check_roots


def test_command_argv_variants() -> None:
    assert command_argv(ExecRequest(argv=["ls", "-l"])) == ["ls", "-l"]
    assert command_argv(ExecRequest(shell="echo hi")) == ["/bin/sh", "-c", "echo hi"]
    assert command_argv(ExecRequest(python="print(1)")) == ["python3", "-c", "print(1)"]


def test_long_sources_are_split_and_rejoined() -> None:
    source = "x = 'a'\n" * (ARG_CHUNK // 4) + "print(len(x), __name__)\n"
    argv = command_argv(ExecRequest(python=source))
    assert len(argv) > 4 and all(len(a) <= ARG_CHUNK for a in argv)
    out = subprocess.run(["python3", *argv[1:]], capture_output=True, text=True, check=True)
    assert out.stdout == "1 __main__\n"
    script = "echo start\n" + "true\n" * (ARG_CHUNK // 3) + "echo 'end'\n"
    argv = command_argv(ExecRequest(shell=script))
    assert len(argv) > 4
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert out.stdout == "start\nend\n"


def test_exec_fields_apply_quotas() -> None:
    q = Quotas(timeout_s=12, output_bytes=4096)
    f = exec_fields(ExecRequest(shell="x", env={"A": "1"}, cwd="sub", stdin="in"), q, stream=True)
    assert f == {
        "argv": ["/bin/sh", "-c", "x"],
        "env": {"A": "1"},
        "cwd": "sub",
        "stdin": "in",
        "timeout": 12,
        "output_cap": 4096,
        "stream": True,
    }
    assert exec_fields(ExecRequest(argv=["a"], timeout_s=3), q, stream=False)["timeout"] == 3


def test_exec_result_ignores_unknown_keys() -> None:
    r = exec_result({"exit_code": 0, "stdout": "x", "future": 1}, node="n", timings={"t": 1.0})
    assert (r.exit_code, r.stdout, r.node, r.timings) == (0, "x", "n", {"t": 1.0})


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../b"])
def test_check_path_refuses_escapes(path: str) -> None:
    with pytest.raises(InvalidInput) as err:
        check_path(path, operation="files.read")
    assert err.value.code == ErrorCode.PATH_OUTSIDE_WORKSPACE and err.value.context["path"] == path


def test_check_path_normalises() -> None:
    assert check_path("/workspace/a/./b") == "a/b" and check_path("/workspace") == "."


def test_check_roots() -> None:
    assert check_roots(["/workspace"], "scan") == ["/workspace"]
    for bad in ([], ["/etc"], ["/workspace", "/tmp"]):
        with pytest.raises(InvalidInput):
            check_roots(bad, "scan")


def test_write_fields_encode() -> None:
    raw = base64.b64encode(b"\x00\xff").decode()
    f = write_fields(
        [FileWrite(path="a.txt", content="hé"), FileWrite(path="b", content=raw, encoding="base64")]
    )
    assert f["files"][0] == {
        "path": "a.txt",
        "data_b64": base64.b64encode("hé".encode()).decode(),
        "mode": 0o644,
    }
    assert f["files"][1]["data_b64"] == raw
    for bad in ("!!", "\u00ddA=="):  # FileWrite refuses both; a model built unchecked too
        unchecked = FileWrite.model_construct(path="c", content=bad, encoding="base64", mode=0o644)
        with pytest.raises(InvalidInput) as err:
            write_fields([unchecked])
        assert err.value.context["field"] == "files[0].content"


def test_file_read_falls_back_to_base64() -> None:
    text = file_read("a", {"data_b64": base64.b64encode(b"hi").decode()}, "utf-8")
    assert (text.content, text.encoding, text.size) == ("hi", "utf-8", 2)
    binary = file_read("b", {"data_b64": base64.b64encode(b"\xff").decode()}, "utf-8")
    assert binary.encoding == "base64" and base64.b64decode(binary.content) == b"\xff"


def test_file_list() -> None:
    listing = file_list(
        {"entries": [{"path": "a", "type": "file", "size": 1, "mode": 420, "mtime": 1.0}]}
    )
    assert listing.entries[0].path == "a" and listing.entries[0].type == "file"
