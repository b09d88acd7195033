"""The turn ops of this node: one handler module per op family, found through a registry.

``registry.OpRegistry`` maps an op's ``kind`` to its handler (as Celery's
``TaskRegistry`` maps a task's name), ``base`` holds the handler types and the
context a handler gets; ``exec``, ``files``, ``processes``, ``code``,
``lifecycle``, ``session`` (close and fork) and ``terminal`` each hold the
handlers of one family, with the agent request fields and reply parsing
beside them.

Nothing is imported here: the registry imports every family.
"""

from __future__ import annotations

__all__: list[str] = []
