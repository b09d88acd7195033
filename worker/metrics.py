"""The data plane's Prometheus metrics, defined in one place, and their server.

A worker node is one process whose Celery pool is ``threads`` (``worker.main``),
so the default registry of ``prometheus_client`` holds the whole node: no
multiprocess mode. ``serve`` starts its ``/metrics`` on the port of
``SANDGRID_WORKER__METRICS_PORT`` (0: any free port) on loopback unless
``SANDGRID_WORKER__METRICS_ADDR`` names another address; the heartbeat carries the
port the node got, so the API lists every node's URL (``GET /v1/nodes``).

Counters and histograms are updated where things happen (the turn task, the
snapshot saves and restores); the pool's gauges are read from the pool when
Prometheus scrapes (``PoolCollector``), so they are never stale.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from sandgrid.wire.catalog import metric_type
from sandgrid.wire.jobs import TurnJob, TurnOutcome
from sandgrid.wire.settings import DEFAULT_WORKER_METRICS_ADDR

__all__ = [
    "IMAGE_PULL_SECONDS",
    "MEMORY_RESUMES",
    "MEMORY_STAGES",
    "SNAPSHOT_BYTES",
    "SNAPSHOT_SECONDS",
    "STAGE_BUCKETS",
    "STAGE_SECONDS",
    "STORE_ERRORS",
    "TURNS",
    "PoolCollector",
    "advertised_host",
    "observe_outcome",
    "serve",
    "watch_pool",
]

log = logging.getLogger(__name__)

#: Latency buckets (s), the same as the API's (``scheduler.metrics``).
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120)
_STAGES = ("worker", "sandbox", "snapshot")

TURNS = Counter(
    "sandgrid_worker_turns",
    "Turns this node ran, by sandbox type, op and outcome (ok or the error code).",
    ["type", "op", "outcome"],
)
STAGE_SECONDS = Histogram(
    "sandgrid_worker_stage_seconds",
    "Time of a turn's stage on the node: worker (all of it), sandbox (the op), snapshot.",
    ["stage", "op"],
    buckets=STAGE_BUCKETS,
)
SNAPSHOT_SECONDS = Histogram(
    "sandgrid_snapshot_seconds",
    "Time of a workspace snapshot save or restore.",
    ["direction"],
    buckets=STAGE_BUCKETS,
)
SNAPSHOT_BYTES = Counter(
    "sandgrid_snapshot_bytes",
    "Bytes of the workspaces saved or restored (the blobs their manifests name).",
    ["direction"],
)
STORE_ERRORS = Counter(
    "sandgrid_worker_store_errors",
    "Errors of the registry (Redis) and the object store (MinIO) a node's turn ended with.",
    ["store", "operation"],
)
# 25.3: a type's image pulled from the grid's registry (worker.images.puller).
IMAGE_PULL_SECONDS = Histogram(
    "sandgrid_worker_image_pull_seconds",
    "Time of a pull of a type's image from the grid's registry, by repository and outcome "
    "(ok, missing: the registry has no such image, failed: out of reach or another fault).",
    ["repository", "outcome"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
# 24 (resume speed): memory images staged ahead, and where a resume took its image.
MEMORY_STAGES = Counter(
    "sandgrid_worker_memory_stages",
    "Requests to stage a paused session's memory image on this node, by result (staged; "
    "moved: no record names it now; busy: another was staging; not_kept: larger than "
    "the bound, or another began meanwhile; failed; off; unsupported).",
    ["result"],
)
MEMORY_RESUMES = Counter(
    "sandgrid_worker_memory_resumes",
    "Memory images this node restored, by where their files came from (staged: ready on "
    "this node; store: fetched at the resume).",
    ["source"],
)
_STORE_CODES = {"registry_unavailable": "registry", "store_unavailable": "objects"}


def observe_outcome(job: TurnJob, outcome: TurnOutcome) -> None:
    """Count a turn this node answered and observe its stages (``outcome.timings`` in ms)."""
    code = "ok" if outcome.ok else str((outcome.error or {}).get("code", "internal"))
    op = job.op.kind
    TURNS.labels(type=metric_type(job.session.type), op=op, outcome=code).inc()
    for stage in _STAGES:
        ms = outcome.timings.get(f"{stage}_ms")
        if ms is not None:
            STAGE_SECONDS.labels(stage=stage, op=op).observe(ms / 1000)
    if code in _STORE_CODES:
        STORE_ERRORS.labels(store=_STORE_CODES[code], operation=op).inc()


class PoolCollector(Collector):
    """The pool's gauges, read at scrape time from ``stats`` (``WarmPool.stats``).

    Args:
        node: the node's name (a label, so a dashboard sums nodes).
        stats: the pool's counters per type, with ``warm``, ``leased``, ``creating``
            and ``target``.
        containers: how many containers the node holds.
    """

    def __init__(
        self,
        node: str,
        stats: Callable[[], dict[str, dict[str, Any]]],
        containers: Callable[[], int],
    ) -> None:
        self.node = node
        self.stats = stats
        self.containers = containers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pool = GaugeMetricFamily(
            "sandgrid_pool_sandboxes",
            "Sandboxes of the node's pool by type and state (warm, leased, creating).",
            labels=["node", "type", "state"],
        )
        stats = _by_label(self.stats())
        for sandbox_type, st in stats:
            for state in ("warm", "leased", "creating"):
                pool.add_metric([self.node, sandbox_type, state], float(st.get(state, 0)))
        yield pool
        target = GaugeMetricFamily(
            "sandgrid_pool_target",
            "Warm sandboxes the node's pool keeps ahead now, by type: the type's pool size "
            "raised by observed demand, up to SANDGRID_WORKER__POOL_MAX (22.3).",
            labels=["node", "type"],
        )
        for sandbox_type, st in stats:
            target.add_metric([self.node, sandbox_type], float(st.get("target", 0)))
        yield target
        containers = GaugeMetricFamily(
            "sandgrid_node_containers",
            "Containers the node holds (warm and leased).",
            labels=["node"],
        )
        containers.add_metric([self.node], float(self.containers()))
        yield containers


def _by_label(stats: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, float]]]:
    """The pool's counters by metric label: tenants' private types summed as ``private``."""
    summed: dict[str, dict[str, float]] = {}
    for sandbox_type, st in stats.items():
        into = summed.setdefault(metric_type(sandbox_type), {})
        for state in ("warm", "leased", "creating", "target"):
            into[state] = into.get(state, 0.0) + float(st.get(state, 0))
    return sorted(summed.items())


_watched: list[PoolCollector] = []


def watch_pool(collector: PoolCollector) -> None:
    """Register the node's pool gauges (again after a restart of the node in-process)."""
    for old in _watched:
        REGISTRY.unregister(old)
    _watched[:] = [collector]
    REGISTRY.register(collector)


def serve(port: int, addr: str = DEFAULT_WORKER_METRICS_ADDR) -> int:
    """Start ``/metrics`` on ``addr``:``port`` (0: any free port); the port it listens on.

    Loopback by default (``SANDGRID_WORKER__METRICS_ADDR``): a node's metrics name
    its tenants' types and load, and its host's addresses are off limits to
    sandboxes (docs/network.md); a Prometheus elsewhere needs the address named.

    A port that is taken (two nodes on one host with the default) is not fatal:
    the node falls back to a free port, logs it, and its heartbeat says which.
    """
    try:
        server, _ = start_http_server(port, addr=addr)
    except OSError as exc:
        log.error("metrics port %d unavailable (%s); serving on a free port instead", port, exc)
        server, _ = start_http_server(0, addr=addr)
    return int(server.server_port)


def advertised_host(addr: str) -> str:
    """The host the API names in a node's metrics URL: the bind address, unless it
    is a wildcard, then this machine's name."""
    return addr if addr not in ("", "0.0.0.0", "::") else socket.gethostname()
