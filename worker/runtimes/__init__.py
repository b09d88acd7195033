"""The runtimes that run sandboxes, found by name and imported only when asked for.

``RUNTIMES`` maps a runtime's name, as the catalog's sandbox types name it
(``sandgrid.wire.catalog``: ``runc``, ``runsc``; ``GET /v1/types`` shows it), to
the class that implements it. ``runtime_for`` imports that module on first use,
so this package and the runtime-neutral code import without any engine's SDK
(the Docker runtimes need the ``docker`` package, the worker extra has it).
A new runtime is one module beside these and one line here (docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from worker.runtimes.base import ByteStream, Runtime
from worker.runtimes.spec import HostLimits, Mount, SandboxSpec

__all__ = [
    "RUNTIMES",
    "ByteStream",
    "HostLimits",
    "Mount",
    "Runtime",
    "SandboxSpec",
    "runtime_for",
]

RUNTIMES: dict[str, str] = {
    "runc": "worker.runtimes.docker_runc:DockerRunc",
    "runsc": "worker.runtimes.docker_runsc:DockerRunsc",
}
"""Runtime name -> ``module:Class`` (Docker with runc, Docker with gVisor's runsc)."""


def runtime_for(name: str, **options: Any) -> Runtime:
    """The runtime called ``name``, made with its own ``options`` (Docker: ``client``).

    Raises:
        ValueError: no runtime of that name (the message lists the known ones).
    """
    try:
        module, cls = RUNTIMES[name].split(":")
    except KeyError:
        raise ValueError(
            f"unknown sandbox runtime {name!r}; expected one of {tuple(RUNTIMES)}"
        ) from None
    runtime = getattr(importlib.import_module(module), cls)(**options)
    assert isinstance(runtime, Runtime) and runtime.name == name, RUNTIMES[name]
    return runtime
