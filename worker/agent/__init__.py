"""sandgrid's in-sandbox agent: PID 1 of every sandbox, a stdlib-only package.

The worker ships it into each sandbox as one zipapp, bind-mounted read-only at
``/opt/sandgrid/agent.py``; the image starts it as root with only the
capabilities SETUID, SETGID and KILL (``python3 -I /opt/sandgrid/agent.py``:
Python runs a zip archive whatever its name). It speaks the framed JSON
protocol of ``docs/agent-protocol.md`` on fd 0/1 (the Docker attach channel)
and writes diagnostics to fd 2.

Import scheme: the modules import only the stdlib and each other, always with
relative imports (``from .framing import send``), never ``worker`` or
``sandgrid``. So the same files import as ``worker.agent.*`` in the worker
(which uses the pure ones: ``framing``, ``limits``, ``scanstate``) and as the
top-level package ``sandgrid_agent`` inside the zipapp, whose root
``__main__.py`` runs ``sandgrid_agent.main.main()``. ``worker.agent_client.bundle``
builds the zipapp; nothing here knows about it.

Modules, one job each: ``errors`` (refusals and request fields), ``limits``
(roots, caps and the checks on them), ``framing`` (frames on fd 0/1),
``reaper`` (PID 1 reaps every child), ``processes`` (the sandbox user's
processes: start, run as, kill), ``exec``, ``files`` (workspace file ops),
``safetar`` (checked extraction), ``access`` (reading what the user closed),
``scanstate`` (the delta state both ends hold), ``scan``, ``transfer``
(snapshot pack, unpack and ranges), ``egress`` (the loopback proxy port relayed to
the host's egress proxy; ``splice`` moves its allowed bytes), ``launcher`` and
``launcherhost`` (exec without a fork of the agent: a small root process
spawns the commands), ``location`` (where this package lives: the command
line of those helper hosts), ``threadcreds`` (one thread's ids: how the scan
and the launcher act as the user without a fork), ``main`` (the dispatch
loop). They import one way (an import-linter ``layers`` contract in
pyproject.toml): the loop, the ops, the user's processes, the launcher, the
pure helpers.

Why it looks the way it does:

- One request at a time, in the main thread: the worker serialises requests
  per container, and a single thread cannot be starved of threads by a fork
  bomb (the pids limit counts the agent's threads too). An exec pumps its
  pipes with ``selectors`` in that same thread.
- PID 1 must reap every zombie; a reaper thread does ``waitpid(-1)`` and hands
  the statuses of the processes the agent is waiting for to their waiters, so
  ``subprocess`` is used to spawn but never to wait.
- File operations run in a forked child that drops to uid/gid 1000, so user
  permissions and symlinks apply exactly as they would to user code; the
  agent itself has no DAC override and could not read the user's files anyway.
"""

from __future__ import annotations

__all__: list[str] = []
