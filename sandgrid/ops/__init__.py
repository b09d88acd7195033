"""The turn ops, one module per family: each op's request and result models, side by side.

An op is a pair of frozen wire models: the request a worker is asked to run
(``kind``-tagged, a member of ``sandgrid.wire.jobs.TurnOp``) and the result it
answers (a member of ``sandgrid.wire.jobs.TurnResult``, tagged by its own
``kind``, which never appears in an HTTP body). The families:

- ``exec``: one command (``ExecOp`` -> ``ExecResult``);
- ``files``: write, read, list, delete, tar upload and download;
- ``code``: the session's Jupyter kernel (``RunCodeOp`` -> ``CodeResult``);
- ``processes``: background processes (start, then list, logs, stdin, kill, wait);
- ``lifecycle``: checkpoints, restore, pause;
- ``session``: the ops of a session's record (close, fork);
- ``terminal``: an interactive shell on a pty.

Results that are also public HTTP bodies are the SDK's own models
(``sandgrid.models``, ``sandgrid.lifecycle``, ``sandgrid.processes``) and are
imported here, not copied. This package imports only pydantic, the standard
library and those models: it is part of what ``pip install sandgrid`` needs.
"""

from __future__ import annotations

__all__: list[str] = []
