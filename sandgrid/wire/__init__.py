"""The contract between the control plane (``scheduler``) and the data plane (``worker``).

Queue and task names, Redis keys, the Celery app, the turn job and its outcome,
the sandbox catalog, and the registry operations a worker performs. Both sides
import it; the SDK never does (it needs celery and redis).
"""

from __future__ import annotations

__all__: list[str] = []
