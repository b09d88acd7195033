"""The build sandbox says why a base cannot run the agent (25.2), without a python3 probe of
its own: a base without python3 fails the start, one whose python3 ends fails the first exec."""

from __future__ import annotations

import time
from unittest import mock

import docker.errors
import pytest

from sandgrid.templates import BuildQuotas
from worker.templates.errors import BuildFailed
from worker.templates.sandbox import (
    BUILD_RUNTIME,
    NO_BUILD_RUNTIME,
    NO_PYTHON,
    BuildSandbox,
    SandboxEnded,
)


class _Logs(list[bytes]):
    """A container's followed logs, as the SDK's ``CancellableStream`` (closable)."""

    def close(self) -> None:
        pass


def _sandbox(state: dict[str, object], egress_dir: str | None = None) -> BuildSandbox:
    client = mock.Mock()
    client.containers.create.return_value.attrs = {"State": state}
    with mock.patch("worker.templates.sandbox.agent_path", return_value="/agent.pyz"):
        sandbox = BuildSandbox(
            client, "sandgrid-build-x", "img", BuildQuotas(), egress_dir=egress_dir,
            egress_port=3128, labels={},
        )  # fmt: skip
    sandbox.bind("build-x", time.time() + 60)
    return sandbox


def test_the_sandbox_runs_under_the_build_runtime_and_an_engine_without_it_refuses() -> None:
    sbx = _sandbox({"Running": True})
    assert sbx.client.containers.create.call_args.kwargs["runtime"] == BUILD_RUNTIME
    client = mock.Mock()
    client.containers.create.side_effect = docker.errors.APIError(
        f"unknown or invalid runtime name: {BUILD_RUNTIME}"
    )
    with (
        mock.patch("worker.templates.sandbox.agent_path", return_value="/agent.pyz"),
        pytest.raises(BuildFailed) as err,
    ):
        BuildSandbox(client, "b", "img", BuildQuotas(), egress_dir=None, egress_port=1, labels={})
    assert err.value.reason == NO_BUILD_RUNTIME and "memory quota" in err.value.reason


def test_a_base_without_python3_is_refused_at_the_start() -> None:
    sbx = _sandbox({})
    sbx.container.start.side_effect = docker.errors.APIError(
        'starting sandbox: error finding executable "python3" in PATH'
    )
    assert sbx.start() == NO_PYTHON
    sbx.client.api.exec_create.assert_not_called()  # no probe exec


def test_a_start_that_runs_makes_no_exec() -> None:
    sbx = _sandbox({"Running": True})
    assert sbx.start() is None
    sbx.client.api.exec_create.assert_not_called()
    sbx.remove()


def test_python3_that_ended_at_the_start_fails_the_first_step_saying_so() -> None:
    sbx = _sandbox({"Running": False, "ExitCode": 1})
    sbx.client.api.exec_create.side_effect = docker.errors.APIError("container is not running")
    with pytest.raises(SandboxEnded, match="needs python3"):
        sbx.shell("true", lambda _: None)


def test_a_sandbox_that_ends_after_a_step_is_not_called_a_missing_python3() -> None:
    sbx = _sandbox({"Running": True})
    sbx.client.api.exec_create.return_value = {"Id": "e1"}
    sbx.client.api.exec_start.return_value = iter([b"ok\n"])
    sbx.client.api.exec_inspect.return_value = {"ExitCode": 0}
    assert sbx.shell("true", lambda _: None).exit_code == 0
    sbx.container.attrs = {"State": {"Running": False, "ExitCode": 137, "OOMKilled": True}}
    sbx.client.api.exec_create.side_effect = docker.errors.APIError("container is not running")
    with pytest.raises(SandboxEnded, match="out of memory") as ended:
        sbx.shell("true", lambda _: None)
    assert "python3" not in str(ended.value)


def test_an_engine_error_with_pid_1_running_is_raised_as_it_is() -> None:
    sbx = _sandbox({"Running": True})
    sbx.client.api.exec_create.side_effect = docker.errors.APIError("engine busy")
    with pytest.raises(docker.errors.APIError):
        sbx.shell("true", lambda _: None)


def test_the_deadline_closes_the_running_steps_stream() -> None:
    sbx = _sandbox({"Running": True})
    sbx.client.api.exec_create.return_value = {"Id": "e1"}
    stream = mock.MagicMock()

    def chunks() -> object:
        sbx._kill()  # the deadline, while the step runs
        raise ValueError("I/O operation on closed file")  # what a closed stream may raise

    stream.__iter__.side_effect = chunks
    sbx.client.api.exec_start.return_value = stream
    ran = sbx.shell("sleep 300", lambda _: None)
    assert ran.timed_out and ran.exit_code == -9
    stream.close.assert_called_once()
    sbx.container.remove.assert_called()


def test_with_network_the_first_step_waits_for_the_relay_to_listen() -> None:
    sbx = _sandbox({"Running": True}, egress_dir="/run/egress/x")
    sbx.container.logs.return_value = _Logs([b"sandgrid-relay-", b"listening\n"])
    sbx.client.api.exec_create.return_value = {"Id": "e1"}
    sbx.client.api.exec_start.return_value = iter([b"ok\n"])
    sbx.client.api.exec_inspect.return_value = {"ExitCode": 0}
    assert sbx.shell("true", lambda _: None).exit_code == 0
    assert sbx.shell("true", lambda _: None).exit_code == 0
    sbx.container.logs.assert_called_once()  # waited once, before the first step


def test_a_relay_that_ends_silent_fails_the_first_step_saying_python3() -> None:
    sbx = _sandbox({"Running": False, "ExitCode": 1}, egress_dir="/run/egress/x")
    sbx.container.logs.return_value = _Logs([b"Traceback (most recent call last):\n"])
    with pytest.raises(SandboxEnded, match="needs python3"):
        sbx.shell("true", lambda _: None)
    sbx.client.api.exec_create.assert_not_called()
