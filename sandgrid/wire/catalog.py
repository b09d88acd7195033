"""The sandbox types the grid offers: image, runtime, and what each allows.

A type name is the unit of routing (queue ``sbx.<type>``) and of warm pools.
The same image may serve two types that differ by runtime: ``python`` runs on
runc, ``python-gvisor`` on gVisor's runsc. ``bfcl`` and ``appworld`` carry the
benchmarks' packages for batch runs (``sandgrid.benchmarks``). ``browser``
serves headless Chromium's DevTools Protocol (``sandgrid.wire.browser``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandgrid.errors import InvalidInput
from sandgrid.models import NetworkPolicy
from sandgrid.wire.browser import BROWSER_IMAGE, BROWSER_TYPE

__all__ = ["CATALOG", "Runtime", "SandboxType", "get_type"]

Runtime = str
"""A runtime's name in the worker's registry (``worker.runtimes.RUNTIMES``): ``runc``
(Docker with runc), ``runsc`` (Docker with gVisor's runsc). A worker refuses to
serve a type whose runtime it does not have; a unit test holds the catalog's
names to the registry's."""


@dataclass(frozen=True)
class SandboxType:
    """One sandbox type.

    Attributes:
        name: the type's name, as clients ask for it.
        image: the Docker image (its PID 1 is the in-sandbox agent).
        runtime: the runtime its sandboxes run under (for the Docker runtimes
            of today, the OCI runtime's name).
        network_allowed: whether a session may ask for ``quotas.network``.
        default_network: the egress policy of its sessions that give none
            (before the tenant's default; None: offline). docs/network.md.
    """

    name: str
    image: str
    runtime: Runtime
    network_allowed: bool = False
    default_network: NetworkPolicy | None = None


CATALOG: dict[str, SandboxType] = {
    t.name: t
    for t in (
        SandboxType("python", "sandgrid/sandbox-python:latest", "runc"),
        SandboxType("python-gvisor", "sandgrid/sandbox-python:latest", "runsc"),
        # Benchmarks (images/sandbox-bfcl, images/sandbox-appworld; docs/batch.md).
        SandboxType("bfcl", "sandgrid/sandbox-bfcl:latest", "runc"),
        SandboxType("appworld", "sandgrid/sandbox-appworld:latest", "runc"),
        # Headless Chromium under gVisor (images/sandbox-browser; docs/browser.md).
        SandboxType(BROWSER_TYPE, BROWSER_IMAGE, "runsc"),
    )
}


def get_type(name: str) -> SandboxType:
    """The sandbox type called ``name``.

    Raises:
        InvalidInput: no such type; the message lists the known ones.
    """
    try:
        return CATALOG[name]
    except KeyError:
        raise InvalidInput(
            f"type: unknown sandbox type {name!r}; known types: {', '.join(sorted(CATALOG))}",
            context={"field": "type", "rule": "known sandbox type", "value": name},
        ) from None
