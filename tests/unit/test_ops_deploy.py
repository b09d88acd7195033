"""The shipped dashboard and scrape config name only metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import scheduler.metrics
import worker.metrics

ROOT = Path(__file__).resolve().parents[2]
_SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def _defined() -> set[str]:
    assert scheduler.metrics.TURNS and worker.metrics.TURNS  # both sides imported
    names = {m.name for m in REGISTRY.collect()}
    return names | {"sandgrid_pool_sandboxes", "sandgrid_node_containers"}  # at scrape time


def test_every_dashboard_metric_is_defined() -> None:
    dash = json.loads((ROOT / "deploy/grafana/sandgrid.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"sandgrid_[a-z_]+", e)}
    bases = set()
    for name in used:
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                name = name.removesuffix(suffix)
                break
        bases.add(name)
    assert bases <= _defined(), bases - _defined()


def test_scrape_config_covers_the_api_the_workers_and_flower() -> None:
    conf = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in conf["scrape_configs"]}
    assert set(jobs) == {"sandgrid-api", "sandgrid-workers", "flower"}
    assert "basic_auth" in jobs["flower"]


def test_workers_are_discovered_through_the_api_not_listed() -> None:
    """23.18: no static worker ports (the second node's port is whatever it got)."""
    conf = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
    workers = next(j for j in conf["scrape_configs"] if j["job_name"] == "sandgrid-workers")
    assert "static_configs" not in workers
    (sd,) = workers["http_sd_configs"]
    assert sd["url"].endswith("/v1/metrics/targets")
    assert sd["authorization"]["credentials_file"]
