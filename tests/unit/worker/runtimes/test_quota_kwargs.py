"""Quotas become a neutral spec, and the spec hardened Docker create arguments (no Docker
engine needed)."""

from __future__ import annotations

from pathlib import Path

from sandgrid.models import Quotas
from worker.agent_client.bundle import AGENT_MOUNT, agent_path
from worker.quotas import sandbox_labels, sandbox_spec
from worker.runtimes.docker import container_kwargs
from worker.runtimes.hosts import HOSTS, hosts_file
from worker.runtimes.spec import AGENT_CAPS, HostLimits


def kwargs(**quota: object) -> dict[str, object]:
    labels = sandbox_labels(node="n1", sandbox_type="python", incarnation="inc")
    spec = sandbox_spec(
        Quotas.model_validate(quota), image="img", name="c", labels=labels, runtime="runc"
    )
    return container_kwargs(spec, oci_runtime="runc")


def test_hardened_by_default() -> None:
    kw = kwargs()
    hc = kw["host_config"]
    assert isinstance(hc, dict)
    assert hc["cap_drop"] == ["ALL"] and hc["cap_add"] == list(AGENT_CAPS)
    assert set(AGENT_CAPS) == {"SETUID", "SETGID", "KILL"}
    assert hc["security_opt"] == ["no-new-privileges"] and hc["read_only"] is True
    assert hc["network_mode"] == "none" and hc["log_config"]["Type"] == "none"
    assert kw["network_disabled"] is True  # no engine network hook at start
    assert kw["stdin_open"] is True and kw["detach"] is False and kw["tty"] is False
    assert kw["command"] == ["python3", "-I", "-S", AGENT_MOUNT]
    mount = hc["mounts"][0]
    assert mount["Target"] == AGENT_MOUNT and mount["Source"] == str(agent_path())
    assert mount["ReadOnly"] is True
    assert agent_path().is_file()
    hosts = hc["mounts"][1]
    assert hosts["Target"] == "/etc/hosts" and hosts["ReadOnly"] is True
    assert Path(hosts["Source"]).read_text() == HOSTS and Path(hosts["Source"]).stat().st_mode & 0o4


def test_limits_follow_quotas() -> None:
    kw = kwargs(cpus=0.5, memory_mb=300, pids=99, workspace_mb=7, home_mb=5, tmp_mb=3, nofile=100,
                fsize_mb=2)  # fmt: skip
    hc = kw["host_config"]
    assert isinstance(hc, dict)
    assert hc["nano_cpus"] == 500_000_000 and hc["pids_limit"] == 99
    assert hc["mem_limit"] == hc["memswap_limit"] == "300m"
    ws = hc["tmpfs"]["/workspace"].split(",")
    assert {"size=7m", "uid=1000", "gid=1000", "mode=0755", "nosuid", "nodev", "exec"} <= set(ws)
    assert "size=5m" in hc["tmpfs"]["/home/sandbox"] and "size=3m" in hc["tmpfs"]["/tmp"]
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in hc["ulimits"]}
    assert limits == {"nofile": (100, 100), "fsize": (2 << 20, 2 << 20), "core": (0, 0)}
    assert kw["environment"] == {
        "SANDGRID_PIDS_MAX": "99",
        "SANDGRID_MEMORY_MAX": str(300 << 20),
    }


def test_host_overrides_and_network() -> None:
    labels = sandbox_labels(node="n", sandbox_type="python", incarnation="i")
    spec = sandbox_spec(Quotas(), image="i", name="c", labels=labels, runtime="runsc",
                        network="sandnet", host=HostLimits(pids=999, memory_mb=1000))  # fmt: skip
    kw = container_kwargs(spec, oci_runtime="runsc")
    hc = kw["host_config"]
    assert isinstance(hc, dict)
    assert hc["runtime"] == "runsc" and hc["network_mode"] == "sandnet"
    assert kw["network_disabled"] is False  # the engine's network, with its own /etc/hosts
    assert "/etc/hosts" not in [m["Target"] for m in hc["mounts"]]
    assert hc["pids_limit"] == 999 and hc["mem_limit"] == "1000m"


def test_labels_cannot_be_overridden() -> None:
    labels = sandbox_labels(
        node="n1", sandbox_type="python", incarnation="inc", session_id="s-1", tenant="t",
        extra={"sandgrid.session": "forged", "team": "x"},
    )  # fmt: skip
    assert labels == {
        "team": "x",
        "sandgrid.managed": "1",
        "sandgrid.worker": "n1",
        "sandgrid.session": "s-1",
        "sandgrid.tenant": "t",
        "sandgrid.type": "python",
        "sandgrid.incarnation": "inc",
    }
    empty = sandbox_labels(node="n1", sandbox_type="python", incarnation="inc")
    assert empty["sandgrid.session"] == "" and empty["sandgrid.tenant"] == ""


def test_a_hosts_file_that_cannot_be_written_keeps_the_engines_network_setup(
    tmp_path: Path,
) -> None:
    (tmp_path / "sandgrid-hosts").mkdir()  # not a file: unreadable and unwritable, even as root
    assert hosts_file(tmp_path) is None
    labels = sandbox_labels(node="n", sandbox_type="python", incarnation="i")
    spec = sandbox_spec(
        Quotas(), image="i", name="c", labels=labels, runtime="runc",
        agent_path=tmp_path / "agent.pyz",
    )  # fmt: skip
    assert spec.hosts is None
    kw = container_kwargs(spec, oci_runtime="runc")
    hc = kw["host_config"]
    assert isinstance(hc, dict)
    assert kw["network_disabled"] is False and hc["network_mode"] == "none"
    assert "/etc/hosts" not in [m["Target"] for m in hc["mounts"]]
