"""The op registry: every op of ``TurnJob`` has one handler, found by its kind, and
the handler's type says whether the op needs the session's sandbox."""

from __future__ import annotations

import typing

import pytest

from sandgrid.errors import SandgridError
from sandgrid.ops.exec import ExecOp
from sandgrid.wire.jobs import TurnOp
from worker.ops.base import NodeHandler, SandboxHandler
from worker.ops.exec import run_exec
from worker.ops.registry import OPS, OpRegistry


def _kinds() -> set[str]:
    union = typing.get_args(TurnOp)[0]
    return {str(op.model_fields["kind"].default) for op in typing.get_args(union)}


def test_every_op_of_a_turn_has_a_handler() -> None:
    assert set(OPS) == _kinds()


def test_the_handler_says_whether_the_op_needs_the_sandbox() -> None:
    in_sandbox = {k for k in OPS if isinstance(OPS.handler(k), SandboxHandler)}
    assert in_sandbox == {
        "exec",
        "write",
        "read",
        "list",
        "delete",
        "stat",
        "mkdir",
        "move",
        "tar_upload",
        "tar_download",
        "run_code",
        "pty",
        "proc_start",
    }
    assert all(isinstance(OPS.handler(k), NodeHandler) for k in set(OPS) - in_sandbox)


def test_the_ops_that_change_the_workspace_say_so() -> None:
    mutating = {k for k in OPS if getattr(OPS.handler(k), "mutates", False)}
    assert mutating == {"exec", "write", "delete", "mkdir", "move", "tar_upload", "run_code", "pty"}


def test_an_unknown_kind_is_an_error_and_a_kind_has_one_handler() -> None:
    with pytest.raises(SandgridError, match="unknown op"):
        OPS.handler("teleport")
    with pytest.raises(ValueError, match="registered already"):
        OpRegistry([SandboxHandler(ExecOp, run_exec), SandboxHandler(ExecOp, run_exec)])
