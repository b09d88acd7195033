"""Sandbox backends: one interface (``base``), one class per container runtime.

``backend_for(runtime)`` picks the class by the runtime name of the settings
(``SANDGRID_WORKER__RUNTIME``). The Docker backends import ``docker`` lazily, so
this package imports without it.
"""

from __future__ import annotations

from typing import Any

from worker.backends.base import Sandbox, SandboxBackend, SandboxState

__all__ = ["RUNTIMES", "Sandbox", "SandboxBackend", "SandboxState", "backend_for"]

RUNTIMES = ("runc", "runsc")


def backend_for(runtime: str, **kwargs: Any) -> SandboxBackend:
    """A backend for ``runtime`` (``runc`` or ``runsc``).

    Raises:
        ValueError: unknown runtime.
    """
    if runtime == "runc":
        from worker.backends.docker import DockerBackend

        return DockerBackend(**kwargs)
    if runtime == "runsc":
        from worker.backends.gvisor import GVisorBackend

        return GVisorBackend(**kwargs)
    raise ValueError(f"unknown sandbox runtime {runtime!r}; expected one of {RUNTIMES}")
