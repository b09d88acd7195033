"""The in-sandbox agent as the worker delivers it: one zipapp, bind-mounted read-only.

The agent package (``worker/agent/``) is stdlib-only and imports itself with
relative imports; ``build_zipapp`` packs its modules as the top-level package
``sandgrid_agent`` beside a root ``__main__.py`` that runs it. The images start
``python3 -I /opt/sandgrid/agent.py`` (``AGENT_MOUNT``): Python runs a zip
archive whatever its name, so the images need no change.

Each module travels with its bytecode (``<module>.pyc``, PEP 552's unchecked
hash form, compiled by the worker's own Python): a zip cannot take the
``__pycache__`` files Python would otherwise write, so every sandbox start
compiled the whole agent again, about half of its start-up (107 ms against
51 ms here). The images run the same Python as the worker (Debian's 3.11); a
sandbox whose Python has another bytecode version ignores the ``.pyc`` (its
magic number differs) and compiles the ``.py`` beside it, as before.

The archive is deterministic: the same sources give the same bytes (entries
sorted, a fixed timestamp and mode; ``zipapp.create_archive`` would stamp each
file's mtime in local time, so ``zipfile`` writes it here). It is cached by
the hash of those bytes in a directory of the temp dir owned by this user
(``agent-<hash>.pyz``): derived data, rebuilt in milliseconds after a reboot,
seen by a local Docker engine at the same path, and content-addressed, so
workers and test runs of different checkouts on one host never mount each
other's agent.

When the worker itself runs in a container (compose, Kubernetes), the engine
resolves the bind mount on the host: ``SANDGRID_WORKER__AGENT_PATH`` then names
the zipapp's path there, which must be the same path in the worker's own view
(a shared directory); the worker writes the current build there when it is
missing or different, and uses it as it is when it cannot.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import logging
import marshal
import os
import tempfile
import zipfile
from pathlib import Path

from sandgrid.wire.settings import get_settings

__all__ = ["AGENT_MOUNT", "PACKAGE", "SOURCE_DIR", "agent_path", "build_zipapp", "zipapp_bytes"]

_log = logging.getLogger(__name__)

AGENT_MOUNT = "/opt/sandgrid/agent.py"
"""Where the image's CMD expects the agent (a zipapp, despite the suffix)."""
PACKAGE = "sandgrid_agent"
"""The agent package's top-level name inside the zipapp."""
SOURCE_DIR = Path(__file__).parent.parent / "agent"
_EPOCH = (1980, 1, 1, 0, 0, 0)
_MAIN = (
    f'"""sandgrid\'s in-sandbox agent (zipapp built by worker.agent_client.bundle)."""\n'
    f"import sys\n\nfrom {PACKAGE}.main import main\n\nsys.exit(main())\n"
).encode()


def zipapp_bytes(source: Path = SOURCE_DIR) -> bytes:
    """The zipapp of the agent package at ``source``: the same bytes for the same sources."""
    files = {"__main__.py": _MAIN}
    for path in sorted(source.glob("*.py")):
        name = f"{PACKAGE}/{path.name}"
        files[name] = path.read_bytes()
        files[name + "c"] = _bytecode(files[name], f"{AGENT_MOUNT}/{name}")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name], compresslevel=9)
    return buf.getvalue()


def _bytecode(source: bytes, filename: str) -> bytes:
    """``source`` compiled, as an unchecked-hash ``.pyc`` (PEP 552): zipimport loads
    it without comparing times, and the zip's content hash already names the build."""
    code = compile(source, filename, "exec", dont_inherit=True)
    flags = 0b01  # hash-based, unchecked
    header = importlib.util.MAGIC_NUMBER + flags.to_bytes(4, "little")
    return header + importlib.util.source_hash(source) + marshal.dumps(code)


def build_zipapp(cache_dir: Path | None = None, source: Path = SOURCE_DIR) -> Path:
    """Write the zipapp into ``cache_dir`` (default: ``_cache_dir()``) under its hash.

    Returns:
        The path of ``agent-<sha256 prefix>.pyz``, written only when absent or
        different (a file of another content under that name is replaced).
    """
    data = zipapp_bytes(source)
    directory = _cache_dir() if cache_dir is None else cache_dir
    target = directory / f"agent-{hashlib.sha256(data).hexdigest()[:16]}.pyz"
    _write_if_different(target, data)
    return target


def agent_path() -> Path:
    """The agent file to bind-mount, as the engine's host sees it (built on first use)."""
    return _agent_path(get_settings().worker.agent_path)


@functools.cache
def _agent_path(configured: Path | None) -> Path:
    if configured is None:
        return build_zipapp()
    try:
        _write_if_different(configured, zipapp_bytes())
    except OSError as exc:
        _log.warning("agent zipapp %s not updated (%s): mounting it as it is", configured, exc)
    return configured


def _cache_dir() -> Path:
    """A directory of the temp dir that this user created and alone can write to."""
    directory = Path(tempfile.gettempdir()) / f"sandgrid-agent-{os.getuid()}"
    directory.mkdir(mode=0o755, exist_ok=True)
    st = directory.lstat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022 or directory.is_symlink():
        raise PermissionError(f"{directory} is not this user's own directory: not trusted")
    return directory


def _write_if_different(target: Path, data: bytes) -> None:
    try:
        if target.read_bytes() == data:
            return
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)  # atomic: a sandbox never mounts half a file
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
