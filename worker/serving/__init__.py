"""Which sandbox types this node serves, changed at runtime (issue 25.1).

- ``ability``: whether the node can serve a type now (its image is here, its
  runtime is registered): the one check the heartbeat's list rests on.
- ``queues``: the Celery consumer's queues, added and cancelled while it runs.
- ``watch``: polls the catalog's version and starts or stops serving types.
"""

from __future__ import annotations

from worker.serving.ability import can_serve, image_ready, runtime_ready
from worker.serving.queues import QueueControl
from worker.serving.watch import TypeWatch, selected

__all__ = ["QueueControl", "TypeWatch", "can_serve", "image_ready", "runtime_ready", "selected"]
