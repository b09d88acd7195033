"""Servers on loopback for the egress tests: a package index and a dumb-HTTP git server.

Each runs as a process of its own group on a 127.0.0.x address and is stopped
at the end of its ``with`` block. The tests map names to them with the egress
proxy's resolver override (``SANDGRID_WORKER__EGRESS__HOSTS``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx

__all__ = ["bare_repo", "build_wheel", "free_port", "git_server", "http_server", "pypi_server"]

DEMO = "demo_pkg"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def build_wheel(directory: Path, version: str = "1.0") -> Path:
    """A pure-Python wheel ``demo-pkg`` whose module says ``HELLO = 'from the index'``."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{DEMO}-{version}.dist-info"
    files = {
        f"{DEMO}/__init__.py": "HELLO = 'from the index'\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: demo-pkg\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: sandgrid-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = [f"{n},sha256={_digest(c.encode())},{len(c.encode())}" for n, c in files.items()]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = directory / f"{DEMO}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


@contextlib.contextmanager
def _process(argv: list[str], url: str, log: Path, cwd: Path | None = None) -> Iterator[str]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code < 500:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{argv[:4]} did not serve {url}: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


@contextlib.contextmanager
def pypi_server(host: str, port: int, packages: Path, log: Path) -> Iterator[str]:
    """pypiserver over ``packages``; yields its simple index URL."""
    argv = [sys.executable, "-m", "pypiserver", "run", "-i", host, "-p", str(port)]
    argv += ["-a", ".", "-P", ".", "--disable-fallback", str(packages)]
    with _process(argv, f"http://{host}:{port}/simple/", log) as url:
        yield url


@contextlib.contextmanager
def http_server(host: str, port: int, root: Path, log: Path) -> Iterator[str]:
    """``python -m http.server`` over ``root``; yields its base URL."""
    argv = [sys.executable, "-m", "http.server", "--bind", host, str(port)]
    with _process(argv, f"http://{host}:{port}/", log, cwd=root) as url:
        yield url


def bare_repo(root: Path, name: str = "demo.git") -> Path:
    """A bare git repository with one commit (``README`` says ``hello over dumb http``),
    ready for dumb HTTP (``git update-server-info``)."""
    work = root / "work"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    work.mkdir(parents=True)
    (work / "README").write_text("hello over dumb http\n")
    for argv in (["init", "-q", "-b", "main"], ["add", "README"], ["commit", "-qm", "one"]):
        subprocess.run(["git", *argv], cwd=work, env=env, check=True)
    bare = root / "srv" / name
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    subprocess.run(["git", "update-server-info"], cwd=bare, check=True)
    return bare


@contextlib.contextmanager
def git_server(host: str, port: int, root: Path, log: Path) -> Iterator[str]:
    """A dumb-HTTP git server of ``bare_repo``; yields the repository's URL path."""
    bare = bare_repo(root)
    with http_server(host, port, bare.parent, log) as url:
        yield f"{url}{bare.name}"
