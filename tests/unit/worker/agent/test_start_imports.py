"""The agent's start imports only what its first ping and exec need (issue 22.3).

Under gVisor every module the agent imports costs the start of each sandbox
(``python3 -X importtime`` in a runsc sandbox, docs/performance.md): the
modules below are imported by the functions that use them, never at start.
Each check runs the zipapp in a fresh interpreter, as the worker starts it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from worker.agent_client.bundle import PACKAGE, build_zipapp
from worker.quotas import AGENT_COMMAND

DEFERRED = {
    "dataclasses": "background's Proc is a plain class",
    "inspect": "loaded by dataclasses",
    "shutil": "rmtree, copyfileobj and which import it where they run",
    "tarfile": "tar_get, tar_put, pack and unpack import it",
    "bz2": "loaded by shutil and tarfile",
    "lzma": "loaded by shutil and tarfile",
    "secrets": "a scan token is os.urandom(8).hex()",
    "hmac": "loaded by secrets",
    "random": "loaded by secrets",
    "platform": "seccomp reads os.uname().machine",
    "site": "the agent runs with -S (AGENT_COMMAND)",
    "hashlib": "a scan imports it; warm_imports loads it once the first reply is sent",
    "_hashlib": "loaded by hashlib (OpenSSL)",
}


def agent_prints(tmp_path: Path, code: str) -> str:
    """What ``code`` prints after ``from <agent package> import main``, in a fresh
    interpreter run with the agent's flags on its zipapp."""
    archive = build_zipapp(tmp_path)
    head = f"import sys; sys.path.insert(0, {str(archive)!r}); from {PACKAGE} import main; "
    flags = [f for f in AGENT_COMMAND[1:] if f.startswith("-")]
    return subprocess.run(
        [sys.executable, *flags, "-c", head + code], capture_output=True, text=True, check=True
    ).stdout


def test_the_agent_starts_without_the_deferred_modules(tmp_path: Path) -> None:
    out = agent_prints(tmp_path, "import json; print(json.dumps(sorted(sys.modules)))")
    loaded = set(json.loads(out))
    assert f"{PACKAGE}.main" in loaded
    assert sorted(loaded & set(DEFERRED)) == []


def test_the_agent_runs_without_site() -> None:
    assert AGENT_COMMAND[:3] == ("python3", "-I", "-S")


def test_the_first_reply_warms_what_the_start_left_out(tmp_path: Path) -> None:
    out = agent_prints(tmp_path, "main.warm_imports(); print('hashlib' in sys.modules)")
    assert out.strip() == "True"
