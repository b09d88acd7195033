"""Images reach a node through the grid's registry (issue 25, item 3).

The registry is the one ``make services`` runs (``deploy/local/registry.sh``:
Debian's docker-registry on 127.0.0.1:5000, its blobs in MinIO), holding the
sandbox images ``images.sh`` pushed. A second Docker engine of this module's
own (``deploy/local/docker2.sh``, its own data root, no bridge) starts with no
image at all: a worker node on it pulls ``sandgrid/sandbox-python`` from the
registry (the engine's own traffic to 127.0.0.1:5000), reports the pull's time
(``sandgrid_worker_image_pull_seconds`` on its ``/metrics``, a log line), and
runs sessions on runc and runsc. Then the node-side GC removes the pulled image
once no type references it, which leaves the engine as it was. With a small
probe image of its own: a pull by digest shared by callers at once, the clear
error of an image the registry lacks, and the registry's garbage-collect
deleting the blobs (in MinIO) of a deleted manifest.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sandgrid.errors import CapacityError
from sandgrid.localgrid import LocalGrid
from tests.chaos.services import PrivateDockerd, free_port
from tests.integration.test_logs_grid import GRID_ENV, REDIS_URL, _empty_db
from worker.images import DockerImages, ImagePuller, collect_images
from worker.quotas import LABEL_WORKER

pytestmark = pytest.mark.integration

REG = os.environ.get("SANDGRID_IMAGES__REGISTRY", "127.0.0.1:5000")
DOCKER2_DIR = Path(
    os.environ.get("SANDGRID_TEST_IMAGES_DOCKER2_DIR", "/var/lib/sandgrid/images-docker2")
)
REPO = Path(__file__).resolve().parents[2]
NODE = "img-w1"
TOKEN = "tok-images-" + "i" * 24
IMAGE = "sandgrid/sandbox-python:latest"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"missing in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module", autouse=True)
def registry_up() -> None:
    try:
        httpx.get(f"http://{REG}/v2/", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        _unavailable(f"the grid's registry at {REG} does not answer (make services): {exc}")


@pytest.fixture(scope="module")
def engine2() -> Iterator[PrivateDockerd]:
    """A second engine with no image; every image it got is removed at the end."""
    engine = PrivateDockerd(DOCKER2_DIR, ())
    try:
        engine.start()
    except Exception as exc:
        _unavailable(f"cannot run a second Docker engine: {exc}")
    client = engine.client()
    try:
        _clean(client)
        yield engine
    finally:
        _clean(client)
        client.close()
        engine.stop()


def _clean(client: Any) -> None:
    """Remove every container and image of the test's engine."""
    for c in client.api.containers(all=True):
        client.api.remove_container(c["Id"], force=True, v=True)
    for image in client.api.images(all=True):
        with contextlib.suppress(Exception):
            client.api.remove_image(image["Id"], force=True)


def _has(client: Any, ref: str) -> bool:
    return DockerImages(client).has(ref)


def _probe() -> tuple[str, str]:
    """A small image of its own pushed to the registry: ``(repository, digest)``."""
    repo, ref = f"sandgrid/probe-{uuid.uuid4().hex[:8]}", ""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = uuid.uuid4().hex.encode()
        info = tarfile.TarInfo("probe.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    ref = f"{REG}/{repo}:v1"
    docker = ["/usr/bin/docker"]
    subprocess.run(
        [*docker, "import", "-", ref],
        input=buf.getvalue(),
        check=True,
        timeout=60,
        capture_output=True,
    )
    subprocess.run([*docker, "push", "-q", ref], check=True, timeout=120, capture_output=True)
    digests = subprocess.run(
        [*docker, "image", "inspect", "-f", "{{json .RepoDigests}}", ref],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    digest = json.loads(digests)[0].split("@", 1)[1]
    subprocess.run([*docker, "rmi", ref], check=True, capture_output=True)  # only the registry's
    return repo, digest


def _delete_manifest(repo: str, digest: str) -> None:
    resp = httpx.delete(f"http://{REG}/v2/{repo}/manifests/{digest}", timeout=30)
    assert resp.status_code in (202, 404), resp.text


def _pulls(repository: str, text: str, what: str = "count") -> float:
    """``sandgrid_worker_image_pull_seconds_<what>`` of the ok pulls of one repository."""
    head = f"sandgrid_worker_image_pull_seconds_{what}{{"
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(head) and f'repository="{repository}"' in line and 'outcome="ok"' in line
    )


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[LocalGrid]:
    db = _empty_db()  # the test's Redis database (SANDGRID_TEST_REDIS_URL), emptied
    egress = Path(tempfile.mkdtemp(prefix="sgimg-"))  # short: its Unix sockets' paths
    env = {**GRID_ENV, "SANDGRID_WORKER__EGRESS__STATE_DIR": str(egress)}
    port = free_port()
    g = LocalGrid(
        tmp_path / "grid", port=port, redis_url=REDIS_URL, tenants={"img": TOKEN}, env=env
    )
    try:
        g.spawn("api", "serve", "--host", "127.0.0.1", "--port", str(port))
        yield g
    finally:
        g.stop()
        db.flushdb()
        db.close()
        shutil.rmtree(egress, ignore_errors=True)


def _runsc(client: Any) -> bool:
    return "runsc" in (client.info().get("Runtimes") or {})


@pytest.mark.timeout(900)
def test_a_node_without_the_image_pulls_it_from_the_registry_and_runs_sessions(
    grid: LocalGrid, engine2: PrivateDockerd
) -> None:
    client = engine2.client()
    try:
        assert not _has(client, IMAGE) and not _has(client, f"{REG}/{IMAGE}")  # no copy here
        types = "python,python-gvisor" if _runsc(client) else "python"
        grid.start_worker(NODE, types=types, concurrency=2, env={"DOCKER_HOST": engine2.host})
        log = grid.workdir / f"{NODE}.log"
        grid.wait(lambda: "image pull: " in log.read_text(), "the node's pull", timeout=600)
        line = next(ln for ln in log.read_text().splitlines() if "image pull: " in ln)
        assert f"reference={REG}/{IMAGE}" in line and "outcome=ok" in line, line
        grid.wait(lambda: NODE in grid.workers_seen(), f"{NODE} in /v1/health")

        def serving() -> bool:  # the pull done, the node's heartbeat names the types
            nodes = httpx.get(f"{grid.api_url}/v1/nodes", timeout=10).json()["nodes"]
            mine = [n for n in nodes if n["name"] == NODE]
            return bool(mine) and set(types.split(",")) <= set(mine[0].get("types") or [])

        grid.wait(serving, f"{NODE} serving {types}", timeout=600)
        assert _has(client, f"{REG}/{IMAGE}")  # the registry's name: the runtime runs it

        headers = {"Authorization": f"Bearer {TOKEN}"}
        for kind in types.split(","):
            with httpx.Client(base_url=grid.api_url, headers=headers, timeout=180) as api:
                sid = api.post("/v1/sessions", json={"type": kind}).raise_for_status().json()["id"]
                out = api.post(f"/v1/sessions/{sid}/exec", json={"shell": "echo ran"})
                assert out.status_code == 200, (kind, out.text)
                body = out.json()
                assert (body["node"], body["stdout"]) == (NODE, "ran\n"), body
                api.delete(f"/v1/sessions/{sid}").raise_for_status()

        pulls = [ln for ln in log.read_text().splitlines() if "image pull: " in ln]
        assert len(pulls) == 1, pulls  # one pull, for both types
        nodes = httpx.get(f"{grid.api_url}/v1/nodes", timeout=10).json()["nodes"]
        url = next(n["metrics_url"] for n in nodes if n["name"] == NODE)
        exposed = httpx.get(url, timeout=10).text  # the node's /metrics reports it too
        assert _pulls("sandgrid/sandbox-python", exposed) == 1, exposed

        grid.stop()  # the node's containers go with it; then GC on its engine
        for c in client.api.containers(all=True, filters={"label": f"{LABEL_WORKER}={NODE}"}):
            client.api.remove_container(c["Id"], force=True)
        engine = DockerImages(client)
        assert collect_images(engine, REG, [(IMAGE, None)]) == []  # a type names it: kept
        assert collect_images(engine, REG, []) == [f"{REG}/{IMAGE}"]
        assert not _has(client, f"{REG}/{IMAGE}") and client.api.images() == []
    finally:
        client.close()


@pytest.mark.timeout(300)
def test_a_pull_by_digest_is_shared_and_a_missing_image_is_named(engine2: PrivateDockerd) -> None:
    repo, digest = _probe()
    client = engine2.client()
    try:
        puller = ImagePuller(DockerImages(client), REG, node=NODE)
        got: list[str] = []
        threads = [
            threading.Thread(target=lambda: got.append(puller.ensure(f"{repo}:v1", digest)))
            for _ in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert got == [f"{REG}/{repo}@{digest}"] * 4
        text = _exposition()
        assert _pulls(repo, text) == 1 and _pulls(repo, text, "sum") > 0  # four callers, one pull
        assert puller.ensure(f"{repo}:v1", digest) == got[0] and _pulls(repo, _exposition()) == 1

        with pytest.raises(CapacityError) as err:
            puller.ensure(f"sandgrid/no-such-{uuid.uuid4().hex[:8]}:latest")
        assert f"registry {REG} has no" in err.value.message, err.value.message
        assert err.value.context["reason"] == "image_unavailable"
        assert collect_images(DockerImages(client), REG, []) == [f"{REG}/{repo}@{digest}"]
        assert not _has(client, got[0])
    finally:
        client.close()
        _delete_manifest(repo, digest)


def _exposition() -> str:
    from prometheus_client import REGISTRY, generate_latest

    return generate_latest(REGISTRY).decode()


def _blob_keys(bucket: str) -> set[str]:
    """The registry's blob objects in MinIO (root credentials, as the tests have)."""
    from minio import Minio

    c = Minio(
        os.environ.get("SANDGRID_MINIO__ENDPOINT", "127.0.0.1:9000"),
        os.environ["SANDGRID_MINIO__ACCESS_KEY"],
        os.environ["SANDGRID_MINIO__SECRET_KEY"],
        secure=False,
    )
    prefix = "docker/registry/v2/blobs/"
    return {o.object_name or "" for o in c.list_objects(bucket, prefix=prefix, recursive=True)}


@pytest.mark.timeout(300)
def test_registry_gc_deletes_the_blobs_of_a_deleted_image_from_minio() -> None:
    repo, digest = _probe()
    bucket = os.environ.get("SANDGRID_REGISTRY_BUCKET", "sandgrid-registry")
    manifest = f"docker/registry/v2/blobs/sha256/{digest[7:9]}/{digest[7:]}/data"
    assert manifest in _blob_keys(bucket)  # the image lives in the object store
    _delete_manifest(repo, digest)
    env = {**os.environ, "SANDGRID_VENV": os.environ.get("SANDGRID_VENV", sys.prefix)}
    done = subprocess.run(
        [str(REPO / "deploy/local/registry.sh"), "gc"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert manifest not in _blob_keys(bucket)
    httpx.get(f"http://{REG}/v2/", timeout=10).raise_for_status()  # up again after the run
    assert httpx.head(f"http://{REG}/v2/{repo}/manifests/{digest}", timeout=10).status_code == 404


def test_the_registry_s_minio_user_reaches_its_bucket_only_and_it_listens_on_loopback() -> None:
    """25.3: a leak of the registry's config (its MinIO secret) reaches no snapshot."""
    from minio import Minio
    from minio.error import S3Error

    from sandgrid.wire.credentials import DEFAULT_STATE_DIR, generated_secrets

    secrets = generated_secrets(Path(os.environ.get("SANDGRID_STATE_DIR", DEFAULT_STATE_DIR)))
    if not secrets.get("SG_REGISTRY_S3_ACCESS_KEY"):
        _unavailable("no registry MinIO user in secrets.env (make services)")
    user = Minio(
        os.environ.get("SANDGRID_MINIO__ENDPOINT", "127.0.0.1:9000"),
        secrets["SG_REGISTRY_S3_ACCESS_KEY"],
        secrets["SG_REGISTRY_S3_SECRET_KEY"],
        secure=False,
    )
    bucket = os.environ.get("SANDGRID_REGISTRY_BUCKET", "sandgrid-registry")
    assert next(iter(user.list_objects(bucket, prefix="docker/")), None) is not None
    snapshots = os.environ.get("SANDGRID_MINIO__BUCKET", "sandgrid-snapshots")
    for attempt in (
        lambda: list(user.list_objects(snapshots)),
        lambda: user.put_object(snapshots, "x", io.BytesIO(b"x"), 1),
        lambda: user.make_bucket(f"sg-reg-probe-{uuid.uuid4().hex[:6]}"),
    ):
        with pytest.raises(S3Error) as err:
            attempt()
        assert err.value.code == "AccessDenied"
    assert [b.name for b in user.list_buckets()] == [bucket]  # it sees no other bucket
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    port = REG.rsplit(":", 1)[1]
    binds = {ln.split()[3] for ln in listening.splitlines() if ln.split()[3].endswith(f":{port}")}
    assert binds == {REG}, binds
