"""The OpenAI Agents SDK's own sandbox checks, against ``SandgridSandboxClient`` on a real grid.

Written from what the SDK's ``tests/sandbox/`` asserts of a client (its
UnixLocal and Docker session tests: exec, files, the hydrate check, PTY
processes with and without a tty), run on runc and on runsc; the shell
capability's and the runner's checks (``agents.testing``'s scripted model) are
in ``test_openai_agents_sdk_runner.py``, on this module's grid and helpers.
A grid of its own: the API and one worker serving ``python`` and
``python-gvisor``; its tenant's longest deadline is 600 s, so
``timeout=None`` has a ceiling to learn. No model is called: the scripted
model plays the turns. What cannot apply is in docs/integrations.md.

Checks marked ``NEEDS_PARALLEL_TURNS`` (in the runner module) run two calls in one session at once
(the SDK applies up to four manifest entries together; two ``exec_command``
calls in one model turn): they need issue 20's item 1 (``max_parallel_turns``)
and fail with 409 ``session_busy`` before it.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agents.sandbox import (
    Manifest,
)
from agents.sandbox.errors import (
    ExecTimeoutError,
    InvalidManifestPathError,
    PtySessionNotFoundError,
    WorkspaceIOError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.util.tar_utils import validate_tar_bytes
from agents.sandbox.workspace_paths import SandboxPathGrant

from sandgrid.client import AsyncClient
from sandgrid.integrations.openai_agents import (
    SandgridSandboxClient,
    SandgridSandboxClientOptions,
)
from sandgrid.localgrid import LocalGrid
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.support.redis_db import fresh_db

pytestmark = pytest.mark.integration

T = TypeVar("T")
PORT = int(os.environ.get("SANDGRID_TEST_OPENAI_API_PORT", "8741"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TOKEN = "tok-openaisdk-" + "o" * 24
CEILING_S = 600.0
RUNTIMES = [
    pytest.param("python", id="runc"),
    pytest.param("python-gvisor", id="runsc", marks=pytest.mark.runsc),
]
F = TypeVar("F", bound=Callable[..., None])


def NEEDS_PARALLEL_TURNS(test: F) -> F:
    """Marks a check that runs calls of one session at once (issue 20's item 1)."""
    test.__doc__ = (test.__doc__ or "") + " Needs concurrent turns in one session (20.1)."
    return test


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    """The API and one worker; the tenant's longest deadline is ``CEILING_S``."""
    r = fresh_db(REDIS_URL)
    tenant = Tenant(name="sdk", limits=TenantLimits(max_timeout_s=CEILING_S))
    r.hset(names.tokens_key(), hash_token(TOKEN), tenant.model_dump_json())
    env = {"SANDGRID_WORKER__POOL_SIZE": "1", "SANDGRID_WORKER__SNAPSHOT_STORE": "local"}
    where = tmp_path_factory.mktemp("openaigrid") / "grid"
    g = LocalGrid(where, port=PORT, redis_url=REDIS_URL, tenants={}, env=env)
    try:
        g.start(["sdk-w1"], types="python,python-gvisor", concurrency=2)
        yield g
    finally:
        g.stop()
        r.flushdb()
        r.close()


@pytest.fixture(params=RUNTIMES)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _run(grid: LocalGrid, body: Callable[[SandgridSandboxClient], Awaitable[T]], **kw: Any) -> T:
    async def main() -> T:
        async with AsyncClient(grid.api_url, TOKEN) as sdk:
            return await body(SandgridSandboxClient(client=sdk, **kw))

    return asyncio.run(main())


def _in_session(
    grid: LocalGrid, kind: str, body: Callable[[SandboxSession], Awaitable[None]], **quotas: Any
) -> None:
    """Run ``body`` in a new session of ``kind`` (closed at its end)."""

    async def main(client: SandgridSandboxClient) -> None:
        async with await client.create(options=_options(kind, **quotas)) as s:
            await body(s)

    _run(grid, main)


def _options(kind: str, **quotas: Any) -> SandgridSandboxClientOptions:
    return SandgridSandboxClientOptions(
        sandbox_type=kind, quotas=quotas, labels={"test": "openai-sdk-suite"}
    )


# -- exec (UnixLocal / Docker session checks) ---------------------------------------------


def test_exec_output_is_bytes_exact_and_a_cut_is_said(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        raw = await s.exec("printf '\\377\\000\\376caf\\303\\251'; printf '\\200' >&2")
        assert (raw.stdout, raw.stderr, raw.exit_code) == (
            b"\xff\x00\xfecaf\xc3\xa9",
            b"\x80",
            0,
        )
        failed = await s.exec("echo out; echo err >&2; exit 7")
        assert (failed.stdout, failed.stderr, failed.exit_code) == (b"out\n", b"err\n", 7)
        plain = await s.exec("printf", "%s|", "a b", "c", shell=False)
        assert plain.stdout == b"a b|c|"
        big = await s.exec("head -c 200000 /dev/zero")
        assert 0 < len(big.stdout) < 200000 and set(big.stdout) == {0}
        assert getattr(big, "stdout_truncated", False)
        assert b"stdout truncated" in big.stderr  # never cut silently

    _in_session(grid, kind, body, output_bytes=64 << 10)


def test_timeouts_and_timeout_none(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        with pytest.raises(ExecTimeoutError) as caught:
            await s.exec("sleep 30", timeout=1)
        assert caught.value.timeout_s == 1
        slow = await s.exec("sleep 4; echo done")  # past the session's 2 s default
        assert (slow.exit_code, slow.stdout) == (0, b"done\n")

    _in_session(grid, kind, body, timeout_s=2)


# -- files --------------------------------------------------------------------------------


def test_files_round_trip_and_their_errors(grid: LocalGrid, kind: str, tmp_path: Path) -> None:
    big = os.urandom(17 << 20)
    grant = Manifest(extra_path_grants=(SandboxPathGrant(path="/tmp"),))

    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(manifest=grant, options=_options(kind)) as s:
            await s.write(Path("bin/all.bin"), io.BytesIO(bytes(range(256))))
            assert (await s.read(Path("bin/all.bin"))).read() == bytes(range(256))
            await s.write(Path("big.bin"), io.BytesIO(big))
            assert (await s.read(Path("big.bin"))).read() == big  # over the 16 MiB JSON read
            with pytest.raises(WorkspaceReadNotFoundError):
                await s.read(Path("missing.txt"))
            with pytest.raises(InvalidManifestPathError):
                await s.read(Path("../../etc/passwd"))
            with pytest.raises(WorkspaceIOError, match="outside /workspace"):
                await s.read(Path("/tmp/granted.txt"))

    _run(grid, body)


def test_persisted_links_pass_the_sdks_hydrate_check(grid: LocalGrid, kind: str) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        async with await client.create(options=_options(kind)) as a:
            made = await a.exec(
                "mkdir -p src d && echo hi > src/app.py && ln -s /workspace/src/app.py d/abs"
                " && ln -s ../src/app.py d/rel"
            )
            assert made.ok(), made.stderr
            archive = (await a.persist_workspace()).read()
        validate_tar_bytes(archive, allow_external_symlink_targets=False)
        async with await client.create(options=_options(kind)) as b:
            await b.hydrate_workspace(io.BytesIO(archive))
            again = await b.exec("cat d/abs d/rel && readlink d/abs")
            assert again.stdout == b"hi\nhi\n../src/app.py\n"

    _run(grid, body)


# -- PTY processes ------------------------------------------------------------------------


def test_pty_pipes_poll_and_unknown_sessions(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        started = await s.pty_exec_start(
            "sh", "-c", "printf 'stdout\\n'; printf 'stderr\\n' >&2; sleep 1",
            shell=False, yield_time_s=0.05,
        )  # fmt: skip
        assert started.process_id is not None and started.exit_code is None
        done = await s.pty_write_stdin(session_id=started.process_id, chars="", yield_time_s=5.5)
        text = (started.output + done.output).decode()
        assert "stdout" in text and "stderr" in text
        assert (done.process_id, done.exit_code) == (None, 0)
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=started.process_id, chars="")
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=999_999, chars="")

    _in_session(grid, kind, body)


def test_pty_split_utf8_and_max_output_tokens(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        split = await s.pty_exec_start(
            "printf 'a\\342'; sleep 1; printf '\\202\\254b'", yield_time_s=0.3
        )
        assert split.process_id is not None
        rest = await s.pty_write_stdin(session_id=split.process_id, chars="", yield_time_s=5)
        assert split.output + rest.output == "a€b".encode()
        flood = await s.pty_exec_start(
            "head -c 108894 /dev/zero | tr '\\0' 'w'", yield_time_s=5, max_output_tokens=50
        )
        assert flood.exit_code == 0 and flood.original_token_count is not None
        assert flood.original_token_count > 50 and len(flood.output) < 2000

    _in_session(grid, kind, body)


def test_the_ninth_pty_process_drops_the_oldest(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        ids: list[int] = []
        for _ in range(9):
            started = await s.pty_exec_start("sleep 120", yield_time_s=0)
            assert started.process_id is not None  # no LimitExceeded
            ids.append(started.process_id)
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=ids[0], chars="")  # dropped, as the SDK does
        live = await s.pty_write_stdin(session_id=ids[-1], chars="", yield_time_s=0)
        assert live.process_id == ids[-1]
        await s.pty_terminate_all()

    _in_session(grid, kind, body, background_processes=8)


def test_tty_runs_on_a_real_terminal_and_ctrl_c_interrupts(grid: LocalGrid, kind: str) -> None:
    async def body(s: SandboxSession) -> None:
        read = await s.pty_exec_start(
            "sh", "-c", "test -t 0 && IFS= read -r line; printf 'got %s\\n' \"$line\"",
            shell=False, tty=True, yield_time_s=2,
        )  # fmt: skip
        assert read.process_id is not None and read.exit_code is None
        answer = await s.pty_write_stdin(
            session_id=read.process_id, chars="hello from pty\n", yield_time_s=5
        )
        assert answer.exit_code == 0 and b"got hello from pty" in answer.output
        sleeper = await s.pty_exec_start("sleep", "30", shell=False, tty=True, yield_time_s=2)
        assert sleeper.process_id is not None
        stopped = await s.pty_write_stdin(
            session_id=sleeper.process_id, chars="\x03", yield_time_s=5.5
        )
        assert stopped.process_id is None and stopped.exit_code == 130  # SIGINT
        with pytest.raises(PtySessionNotFoundError):
            await s.pty_write_stdin(session_id=sleeper.process_id, chars="")

    _in_session(grid, kind, body)


def test_a_session_handle_is_an_sdk_sandbox_session(grid: LocalGrid, kind: str) -> None:
    async def body(client: SandgridSandboxClient) -> None:
        session = await client.create(options=_options(kind))
        assert isinstance(session, SandboxSession) and session.supports_pty()
        async with session:
            assert await session.running()
        assert not await session.running()

    _run(grid, body)
