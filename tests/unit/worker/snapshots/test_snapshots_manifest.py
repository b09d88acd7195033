"""Entry validation, manifest hashing and parsing; object keys and ids."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from sandgrid.errors import ErrorCode, InvalidInput, SnapshotError
from sandgrid.wire.objects import keys
from worker.agent import limits
from worker.snapshots.format.entries import (
    Entry,
    ManifestLimits,
    check_roots,
    entries_from_scan,
    scan_rows,
    validate_entries,
)
from worker.snapshots.format.manifest import Location, Manifest, content_hash

ROOTS = limits.ROOTS
LIMITS = ManifestLimits()
SHA = hashlib.sha256(b"x").hexdigest()


def f(path: str, size: int = 1, mode: int = 0o644, sha: str = SHA) -> Entry:
    return Entry(path, "file", mode, size, sha, None)


def d(path: str) -> Entry:
    return Entry(path, "dir", 0o755, 0, None, None)


def ln(path: str, target: str) -> Entry:
    return Entry(path, "symlink", 0o777, 0, None, target)


def check(*entries: Entry, limits: ManifestLimits = LIMITS) -> None:
    validate_entries(entries, ROOTS, limits)


def test_a_normal_tree_is_accepted() -> None:
    check(
        d("/workspace/src"),
        f("/workspace/src/a.py"),
        ln("/workspace/src/b.py", "a.py"),
        ln("/workspace/venv-python", "/home/sandbox/.local/bin/python"),
        ln("/workspace/src/up", "../src/./a.py"),
        ln("/workspace/dangling", "/workspace/not/there"),
        d("/home/sandbox/.cache"),
        f("/home/sandbox/.cache/x"),
    )


@pytest.mark.parametrize(
    ("entries", "rule"),
    [
        ([f("/etc/passwd")], "outside the roots"),
        ([f("/workspace2/x")], "outside the roots"),
        ([f("/workspace/../etc/passwd")], "normalised"),
        ([f("/workspace/./a")], "normalised"),
        ([f("/workspace/a/")], "normalised"),
        ([f("//workspace/a")], "normalised"),
        ([f("workspace/a")], "normalised"),
        ([f("/workspace/a\0b")], "normalised"),
        ([f("/workspace/\ud800")], "not encodable"),
        ([Entry("/workspace/a", ["file"], 0o644, 0, None, None)], "device"),  # type: ignore[arg-type]
        ([f("/workspace")], "root"),
        ([f("/workspace/a"), f("/workspace/a")], "twice"),
        ([Entry("/workspace/dev", "chardev", 0o644, 0, None, None)], "device"),
        ([Entry("/workspace/fifo", "other", 0o644, 0, None, None)], "device"),
        ([f("/workspace/a", mode=0o170000)], "mode"),
        ([f("/workspace/a", size=-1)], "size"),
        ([f("/workspace/a", sha="ABC")], "sha256"),
        ([Entry("/workspace/l", "symlink", 0o777, 0, None, None)], "target"),
        ([ln("/workspace/l", "/workspace"), f("/workspace/l/x")], "which is a symlink"),
        ([ln("/workspace/l", "/workspace/d"), f("/workspace/l/deep/x")], "which is a symlink"),
        ([ln("/workspace/l", "/etc"), f("/workspace/l/cron")], "which is a symlink"),
        ([ln("/workspace/l", "/etc"), d("/workspace/l/d"), f("/workspace/l/d/x")], "symlink"),
        ([f("/workspace/f"), f("/workspace/f/x")], "which is a file"),
    ],
)
def test_entries_that_leave_the_roots_are_refused(entries: list[Entry], rule: str) -> None:
    with pytest.raises(InvalidInput) as err:
        check(*entries)
    assert rule in err.value.message


@pytest.mark.parametrize(
    "target",
    ["/usr/bin/python3", "/etc", "../../etc/passwd", "..", "/", "/home", "a", "nowhere/at/all"],
)
def test_a_symlink_target_is_data_whatever_it_names(target: str) -> None:
    """A venv's ``bin/python -> /usr/bin/python3`` is kept: a restore recreates
    links and never writes through them, so where they point does not matter."""
    check(d("/workspace/.venv"), d("/workspace/.venv/bin"), ln("/workspace/.venv/bin/py", target))
    check(ln("/workspace/a", "b"), ln("/workspace/b", "a"))  # a loop is data too


def test_outside_paths_have_their_own_code() -> None:
    with pytest.raises(InvalidInput) as err:
        check(f("/etc/shadow"))
    assert err.value.code == ErrorCode.PATH_OUTSIDE_WORKSPACE
    assert err.value.context["path"] == "/etc/shadow"


def test_limits_are_named_with_their_setting() -> None:
    with pytest.raises(InvalidInput) as err:
        check(f("/workspace/a"), f("/workspace/b"), limits=ManifestLimits(max_files=1))
    assert err.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert "max_files" in err.value.message
    assert "SANDGRID_WORKER__SNAPSHOTS__MAX_FILES" in err.value.message
    with pytest.raises(InvalidInput) as err:
        check(f("/workspace/a", size=11), limits=ManifestLimits(max_bytes=10))
    assert err.value.context == {"limit": "max_bytes", "value": 11, "max": 10}
    with pytest.raises(InvalidInput, match="longer than"):
        check(f("/workspace/" + "a" * 5000))


def test_roots_must_be_distinct_and_disjoint() -> None:
    assert check_roots(["/workspace"]) == ("/workspace",)
    for bad in ([], ["/"], ["workspace"], ["/w", "/w"], ["/w", "/w/x"], ["/w/"], "/w"):
        with pytest.raises(InvalidInput):
            check_roots(bad)


def test_scan_rows_sort_and_normalise() -> None:
    raw: list[dict[str, Any]] = [
        {"path": "/workspace/b", "type": "dir", "mode": 0o755, "size": 4096},
        {"path": "/workspace/a", "type": "file", "mode": 0o644, "size": 1, "sha256": SHA},
    ]
    entries = entries_from_scan(scan_rows(raw), ROOTS, LIMITS)
    assert [e.path for e in entries] == ["/workspace/a", "/workspace/b"]
    assert entries[1].size == 0  # a directory's size means nothing
    with pytest.raises(InvalidInput, match="scan entries"):
        scan_rows([{"path": "/workspace/a"}])


def test_hash_covers_content_and_metadata_not_order() -> None:
    a = (f("/workspace/a"), d("/workspace/d"))
    assert content_hash(ROOTS, a) == content_hash(list(ROOTS), list(a))
    assert content_hash(ROOTS, a) != content_hash(ROOTS, (f("/workspace/a", mode=0o755), a[1]))
    assert content_hash(ROOTS, a) != content_hash(("/workspace",), a)


def manifest(**over: Any) -> Manifest:
    entries = (d("/workspace/d"), f("/workspace/d/x"))
    fields: dict[str, Any] = {
        "tenant": "acme",
        "session_id": "s1",
        "seq": 3,
        "snapshot_id": "0123456789ab",
        "created": 1.0,
        "parent": None,
        "roots": ROOTS,
        "entries": entries,
        "hash": content_hash(ROOTS, entries),
        "where": {SHA: Location(SHA, 0)},
        "blobs": {SHA: 1},
    }
    fields.update(over)
    return Manifest(**fields)


def parse(data: bytes, **kw: Any) -> Manifest:
    args: dict[str, Any] = {
        "tenant": "acme",
        "session_id": "s1",
        "name": "000000000003-0123456789ab",
        "limits": LIMITS,
    }
    args.update(kw)
    return Manifest.from_json(data, **args)


def test_manifest_json_round_trip() -> None:
    m = manifest()
    back = parse(m.to_json())
    assert (back.entries, back.hash, back.where, back.blobs) == (
        m.entries,
        m.hash,
        m.where,
        m.blobs,
    )
    assert back.name == m.name == "000000000003-0123456789ab"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda doc: doc.update(hash="0" * 64),
        lambda doc: doc.update(entries=list(reversed(doc["entries"]))),
        lambda doc: doc["entries"][1].__setitem__(6, None),
        lambda doc: doc["entries"][1].__setitem__(7, 1),
        lambda doc: doc.update(blobs=[[SHA, 0]]),
        lambda doc: doc.update(blobs=[["../x", 1]]),
        lambda doc: doc.update(blobs=[[SHA, 1], [SHA, 1]]),
        lambda doc: doc.update(seq="3"),
        lambda doc: doc.update(v=99),
        lambda doc: doc.update(tenant="../other"),
        lambda doc: doc["entries"].append(["/workspace/d/y"]),
        lambda doc: doc["entries"].append(["/workspace/d/y", "dir", 493, 0, None, None]),
        lambda doc: doc.pop("roots"),
    ],
)
def test_bad_stored_manifests_are_corrupt(mutate: Any) -> None:
    doc = json.loads(manifest().to_json())
    mutate(doc)
    with pytest.raises(SnapshotError) as err:
        parse(json.dumps(doc).encode())
    assert err.value.code == ErrorCode.SNAPSHOT_CORRUPT


@pytest.mark.parametrize(
    "kw",
    [{"tenant": "globex"}, {"session_id": "s2"}, {"name": "000000000004-0123456789ab"}],
)
def test_manifest_of_another_owner_or_name_is_refused(kw: dict[str, str]) -> None:
    with pytest.raises(SnapshotError, match="another"):
        parse(manifest().to_json(), **kw)


def test_not_json_is_corrupt() -> None:
    with pytest.raises(SnapshotError):
        parse(b"\xff not json")


# ---- keys -----------------------------------------------------------------------------


def test_keys_are_namespaced_by_tenant_and_session() -> None:
    assert keys.blob_key("acme", SHA) == f"t/acme/blobs/{SHA}"
    assert keys.pointer_key("acme", "s1") == "t/acme/s/s1/latest"
    name = keys.snapshot_name(7, "00ff00ff00ff")
    assert keys.manifest_key("acme", "s1", name) == f"t/acme/s/s1/snap/{name}.json"
    assert keys.parse_session_key("acme", f"t/acme/s/s1/snap/{name}.json") == ("s1", name)
    assert keys.parse_session_key("acme", "t/acme/s/s1/latest") == ("s1", None)
    assert keys.parse_session_key("acme", "t/acme/s/s1/snap/junk.json") is None
    assert keys.parse_session_key("acme", "t/acmex/s/s1/latest") is None


@pytest.mark.parametrize("bad", ["", "a/b", "..", "x..y", "-a", ".a", "a\n", "é", None, 5])
def test_bad_ids_never_become_keys(bad: Any) -> None:
    with pytest.raises(InvalidInput):
        keys.pointer_key(bad, "s1")
    with pytest.raises(InvalidInput):
        keys.pointer_key("acme", bad)
    with pytest.raises(InvalidInput):
        keys.blob_key("acme", "../" + SHA)
    with pytest.raises(InvalidInput):
        keys.manifest_key("acme", "s1", "../../latest")
