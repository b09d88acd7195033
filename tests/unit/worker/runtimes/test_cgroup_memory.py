"""A started gVisor sandbox's host memory limit, raised in its own cgroup: only the
container's own, memory+swap before memory, and anything unexpected left to the
Engine API (a fake procfs and cgroup tree stand for the host's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from worker.runtimes.cgroup_memory import raise_memory_limit

CONTAINER = "c0ffee" * 10
QUOTA, LIMIT = 512 << 20, 1024 << 20


class Host:
    """``/proc/<pid>/cgroup`` of one process, and a cgroup tree whose files record their writes."""

    def __init__(self, tmp: Path, cgroup: str) -> None:
        self.proc, self.root = tmp / "proc", tmp / "cgroup"
        (self.proc / "7").mkdir(parents=True)
        (self.proc / "7" / "cgroup").write_text(cgroup)
        self.writes: list[str] = []

    def group(self, *parts: str, files: tuple[str, ...]) -> Path:
        directory = self.root.joinpath(*parts)
        directory.mkdir(parents=True)
        for name in files:
            (directory / name).write_text(f"{QUOTA}\n")
        return directory

    def raise_(self, container: str = CONTAINER) -> bool:
        return raise_memory_limit(7, container, LIMIT, root=self.root, proc=self.proc)


V1 = f"12:memory:/docker/{CONTAINER}\n3:cpu,cpuacct:/docker/{CONTAINER}\n0::/system.slice\n"
V1_FILES = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes")


def test_v1_raises_memory_and_swap_of_the_containers_own_group(tmp_path: Path) -> None:
    host = Host(tmp_path, V1)  # a hybrid host: the v2 line names another group
    group = host.group("memory", "docker", CONTAINER, files=V1_FILES)
    assert host.raise_()
    assert {n: int((group / n).read_text()) for n in V1_FILES} == dict.fromkeys(V1_FILES, LIMIT)


def test_v1_raises_swap_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = Host(tmp_path, V1)
    host.group("memory", "docker", CONTAINER, files=V1_FILES)
    order: list[str] = []
    write = Path.write_text

    def record(path: Path, text: str) -> int:
        order.append(path.name)
        return write(path, text)

    monkeypatch.setattr(Path, "write_text", record)
    assert host.raise_()
    assert order == ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]


def test_v1_without_swap_accounting_raises_memory(tmp_path: Path) -> None:
    host = Host(tmp_path, V1)
    group = host.group("memory", "docker", CONTAINER, files=("memory.limit_in_bytes",))
    assert host.raise_()
    assert int((group / "memory.limit_in_bytes").read_text()) == LIMIT


def test_v2_raises_memory_max(tmp_path: Path) -> None:
    host = Host(tmp_path, f"0::/system.slice/docker-{CONTAINER}.scope\n")
    group = host.group("system.slice", f"docker-{CONTAINER}.scope", files=("memory.max",))
    assert host.raise_()
    assert int((group / "memory.max").read_text()) == LIMIT


@pytest.mark.parametrize(
    "cgroup",
    [
        "12:memory:/docker/another\n",  # not this container's group
        f"12:memory:/../../docker/{CONTAINER}\n",  # a path that climbs (a cgroup namespace)
        f"12:pids:/docker/{CONTAINER}\n",  # no memory controller named
    ],
)
def test_a_group_not_the_containers_own_is_left_alone(tmp_path: Path, cgroup: str) -> None:
    host = Host(tmp_path, cgroup)
    group = host.group("memory", "docker", CONTAINER, files=V1_FILES)
    assert not host.raise_()
    assert all(int((group / n).read_text()) == QUOTA for n in V1_FILES)


def test_no_process_or_no_group_here_answers_false(tmp_path: Path) -> None:
    host = Host(tmp_path, V1)
    assert not host.raise_()  # the group's directory is not in this tree
    assert not raise_memory_limit(8, CONTAINER, LIMIT, root=host.root, proc=host.proc)
