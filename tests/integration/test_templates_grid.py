"""Templates built on a real grid (issue 25.2, 25.5): pip through the egress proxy, a session
of the new type, the grid's services out of a step's reach, nothing left by a failure,
another tenant's template invisible, and the bad input refused with 422 naming the field.

A grid of its own (API and one worker serving ``python``, ``python-gvisor`` and
``tpl-*``) whose egress proxy maps ``pypi.test`` to a pypiserver on 127.0.0.25
(the resolver override, a test-only setting, as in test_egress_grid.py).
Builds always run under gVisor, so the whole module is marked ``runsc``.
"""

from __future__ import annotations

import functools
import io
import json
import os
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import docker
import httpx
import pytest
import redis

from sandgrid.localgrid import LocalGrid
from sandgrid.streaming import SSEParser
from sandgrid.wire import names
from scheduler.tenants import Tenant, TenantLimits, hash_token
from tests.support.egress_servers import build_wheel, pypi_server

pytestmark = [pytest.mark.integration, pytest.mark.runsc]

PORT = int(os.environ.get("SANDGRID_TEST_TEMPLATES_API_PORT", "8747"))
REDIS_URL = os.environ.get("SANDGRID_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
NODE = "tpl-w1"
PYPI = "127.0.0.25"
ACME = "tok-acme-" + "a" * 24
GLOBEX = "tok-globex-" + "b" * 24
ADMIN = "admin-" + "c" * 24
HOSTS = {"pypi.test": PYPI}
PIP_POLICY = {"allow": ["pypi.test", PYPI]}
PIP = "pip install -q --trusted-host pypi.test --index-url http://pypi.test/simple demo-pkg"
#: A step that tries the grid's Redis, MinIO, registry and API through the proxy and directly:
#: it prints one line per try and exits 7, so the build fails whatever it reached.
PROBE = f"""python3 - <<'PY'
import os, socket, sys, urllib.request
os.environ["NO_PROXY"] = os.environ["no_proxy"] = ""  # loopback too goes to the proxy
for port in (6379, 9000, 5000, {PORT}):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{{port}}/", timeout=5).read(1)
        print("REACHED-PROXY", port)
    except Exception as exc:
        print("refused-proxy", port, type(exc).__name__, str(exc)[:120])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        print("REACHED-DIRECT", port)
    except OSError as exc:
        print("refused-direct", port, type(exc).__name__)
sys.exit(7)
PY"""


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalGrid]:
    work = tmp_path_factory.mktemp("templatesgrid")
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        r.flushdb()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    netco = TenantLimits(
        allow_network=True, network_ceiling=["*", PYPI, "127.0.0.1"], max_image_mb=4096
    )
    r.hset(
        names.tokens_key(), hash_token(ACME), Tenant(name="acme", limits=netco).model_dump_json()
    )
    (work / "admin-token").write_text(ADMIN + "\n")
    build_wheel(work / "packages")
    g = LocalGrid(
        work / "grid",
        port=PORT,
        redis_url=REDIS_URL,
        tenants={"globex": GLOBEX},
        env={
            "SANDGRID_ADMIN_TOKEN_FILE": str(work / "admin-token"),
            "SANDGRID_WORKER__POOL_SIZE": "0",
            "SANDGRID_WORKER__SNAPSHOT_STORE": "local",
            "SANDGRID_WORKER__EGRESS__STATE_DIR": str(work / "egress"),
            "SANDGRID_WORKER__EGRESS__HOSTS": json.dumps(HOSTS),
            "SANDGRID_HEARTBEAT_S": "0.5",
            "SANDGRID_TYPES_POLL_S": "0.5",
            "SANDGRID_API_PORT": str(PORT),  # the nodes' egress guard knows the API's port
        },
    )
    with pypi_server(PYPI, 80, work / "packages", work / "pypi.log"):
        try:
            g.start([NODE], types="python,python-gvisor,tpl-*", concurrency=2)
            yield g
        finally:
            g.stop()
            _drop_images()
            r.flushdb()
            r.close()


def _drop_images() -> None:
    """The templates' images: their tags on the engine and their manifests in the registry
    (its blobs go at the operator's next ``make registry-gc``)."""
    client = docker.from_env()
    pushed: set[str] = set()
    try:
        for image in client.images.list():
            for tag in image.tags:
                if "/tpl-acme-" in tag or "/tpl-globex-" in tag:
                    pushed.update(d for d in image.attrs.get("RepoDigests") or [] if "/tpl-" in d)
                    client.images.remove(tag, force=True)
    finally:
        client.close()
    for ref in pushed:  # 127.0.0.1:5000/sandgrid/tpl-acme-x@sha256:...
        host, _, rest = ref.partition("/")
        repo, _, digest = rest.partition("@")
        httpx.delete(f"http://{host}/v2/{repo}/manifests/{digest}", timeout=10)


def call(method: str, path: str, token: str = ACME, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    url = f"http://127.0.0.1:{PORT}{path}"
    return httpx.request(method, url, json=body, headers=headers, timeout=120)


def build(grid: LocalGrid, body: dict[str, Any], token: str = ACME) -> dict[str, Any]:
    """POST the template, wait for its end; its final record."""
    resp = call("POST", "/v1/templates", token, body)
    assert resp.status_code == 202, resp.text
    assert resp.json()["state"] == "building"
    done: dict[str, Any] = {}

    def finished() -> bool:
        done.update(call("GET", f"/v1/templates/{body['name']}", token).json())
        return done.get("state") in ("ready", "failed")

    grid.wait(finished, f"template {body['name']} built", timeout=300)
    return done


def leftovers(name: str) -> tuple[list[str], list[str]]:
    """Build containers and images of template ``name`` still on the engine: a build's
    sandbox is gone after it (one taken warm is renamed after its build); the node's warm
    ones (``sandgrid-build-warm-*``, no step run in them) are not leftovers."""
    client = docker.from_env()
    try:
        containers = [
            c.name
            for c in client.containers.list(all=True, filters={"label": "sandgrid.build"})
            if not c.name.startswith("sandgrid-build-warm-")
        ]
        images = [t for i in client.images.list() for t in i.tags if f"/tpl-acme-{name}:" in t]
        return containers, images
    finally:
        client.close()


def test_a_template_installs_from_the_local_index_and_its_sessions_import_it(
    grid: LocalGrid,
) -> None:
    body = {"name": "tpl-demo", "from": "python", "steps": [{"run": PIP}], "network": PIP_POLICY}
    done = build(grid, body)
    assert done["state"] == "ready", json.dumps(done)
    assert done["image"].startswith("127.0.0.1:5000/sandgrid/tpl-acme-tpl-demo:")
    assert done["digest"].startswith("sha256:")
    kind = call("GET", "/v1/types/tpl-demo").json()
    assert (
        kind["tenant"] == "acme" and kind["runtime"] == "runsc" and kind["digest"] == done["digest"]
    )

    grid.wait(lambda: call("GET", "/v1/types/tpl-demo").json()["nodes"] == [NODE], "node serves it")
    sid = call("POST", "/v1/sessions", body={"type": "tpl-demo"}).json()["id"]
    out = call(
        "POST",
        f"/v1/sessions/{sid}/exec",
        body={"shell": "python3 -c 'import demo_pkg; print(demo_pkg.HELLO)'"},
    ).json()
    assert out["exit_code"] == 0 and out["stdout"].strip() == "from the index", out
    call("DELETE", f"/v1/sessions/{sid}")
    assert leftovers("tpl-demo")[0] == []


def test_another_tenant_can_neither_see_nor_use_a_template(grid: LocalGrid) -> None:
    if call("GET", "/v1/templates/tpl-demo").json().get("state") != "ready":
        build(
            grid,
            {"name": "tpl-demo", "from": "python", "steps": [{"run": PIP}], "network": PIP_POLICY},
        )
    assert call("GET", "/v1/templates/tpl-demo", GLOBEX).status_code == 404
    assert call("GET", "/v1/types/tpl-demo", GLOBEX).status_code == 404
    made = call("POST", "/v1/sessions", GLOBEX, {"type": "tpl-demo"})
    assert made.status_code == 404, made.text
    # nor build over its name, nor from it
    for name, base, field in (("tpl-demo", "python", "name"), ("tpl-g", "tpl-demo", "from")):
        body = {"name": name, "from": base, "steps": [{"run": "true"}]}
        refused = call("POST", "/v1/templates", GLOBEX, body)
        assert refused.status_code == 422 and field in refused.text, refused.text


def test_a_step_cannot_reach_redis_minio_the_registry_or_the_api(grid: LocalGrid) -> None:
    policy = {"allow": ["127.0.0.1", "pypi.test"]}  # even allowed, the grid's ports are refused
    done = build(
        grid, {"name": "tpl-probe", "from": "python", "steps": [{"run": PROBE}], "network": policy}
    )
    assert done["state"] == "failed" and done["exit_code"] == 7, done
    log = done["log"]
    assert "REACHED" not in log, log
    for port in (6379, 9000, 5000, PORT):
        assert f"refused-proxy {port}" in log and f"refused-direct {port}" in log, log
    seen = audited(done["build_id"])
    for port in (6379, 9000, 5000, PORT):  # the proxy saw each try and refused it
        assert [a for a in seen if a["port"] == port and not a["allowed"]], json.dumps(seen)
    assert not [a for a in seen if a["allowed"]], seen


def audited(build_id: str) -> list[dict[str, Any]]:
    """The egress attempts the proxy recorded for a build's pseudo-session."""
    r: redis.Redis[str] = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        key = names.egress_audit_key(names.template_build_session(build_id))
        return [json.loads(fields["a"]) for _, fields in r.xrange(key)]
    finally:
        r.close()


def test_the_time_quota_ends_a_build_and_leaves_nothing(grid: LocalGrid) -> None:
    body = {"name": "tpl-slow", "from": "python", "steps": [{"run": "sleep 300"}]}
    started = time.monotonic()
    done = build(grid, {**body, "quotas": {"timeout_s": 5}})
    assert done["state"] == "failed" and "time quota" in done["error"], done
    assert time.monotonic() - started < 60
    assert leftovers("tpl-slow") == ([], [])


def test_an_image_above_the_builds_image_mb_fails_and_leaves_nothing(grid: LocalGrid) -> None:
    body = {"name": "tpl-big", "from": "python", "steps": [{"run": "true"}]}
    done = build(grid, {**body, "quotas": {"image_mb": 100}})  # the base alone is larger
    assert done["state"] == "failed" and done["error"].startswith("quotas.image_mb"), done
    assert leftovers("tpl-big") == ([], [])
    assert call("GET", "/v1/types/tpl-big").status_code == 404


def test_what_the_steps_write_is_bounded_by_the_builds_memory(grid: LocalGrid) -> None:
    """The root's overlay is in the sandbox's memory (runtime runsc-build): a step writing
    more than the build's memory is ended in the step, never written to the host's disk."""
    fill = "dd if=/dev/zero of=/fill bs=1M count=1536 && echo wrote-$((6 * 7))"
    body = {"name": "tpl-fill", "from": "python", "steps": [{"run": fill}]}
    done = build(grid, {**body, "quotas": {"memory_mb": 256, "image_mb": 4096}})
    assert done["state"] == "failed" and done["failed_step"] == 0, done
    assert "wrote-42" not in done["log"], done
    assert leftovers("tpl-fill") == ([], [])


def test_a_failed_step_answers_its_exit_code_and_log_and_leaves_nothing(grid: LocalGrid) -> None:
    steps = [
        {"run": "echo one > /one"},
        {"run": "echo the-step-output; exit 3"},
        {"run": "echo never"},
    ]
    done = build(grid, {"name": "tpl-fails", "from": "python-gvisor", "steps": steps})
    assert done["state"] == "failed" and done["failed_step"] == 1 and done["exit_code"] == 3, done
    assert "the-step-output" in done["log"] and "never" not in done["log"].split("step 2/3")[1]
    assert leftovers("tpl-fails") == ([], [])
    assert call("GET", "/v1/types/tpl-fails").status_code == 404
    assert not [k for k in redis.Redis.from_url(REDIS_URL).scan_iter(match="sg:session:build-*")]
    # a failed name may be built again
    again = build(grid, {"name": "tpl-fails", "from": "python", "steps": [{"run": "true"}]})
    assert again["state"] == "ready", again


def test_a_base_without_python3_is_refused_saying_the_agent_needs_it(grid: LocalGrid) -> None:
    kind = {"name": "bare-debian", "image": "sandgrid/debian-base:bookworm", "runtime": "runsc"}
    added = call("POST", "/v1/types", ADMIN, kind)
    assert added.status_code in (200, 201), added.text
    done = build(grid, {"name": "tpl-bare", "from": "bare-debian", "steps": [{"run": "true"}]})
    assert done["state"] == "failed" and "needs python3" in done["error"], done
    assert leftovers("tpl-bare") == ([], [])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "python", "from": "python"}, "name"),
        ({"name": "tpl-x", "from": "no-such-type"}, "from"),
        ({"name": "tpl-x", "from": "python", "quotas": {"memory_mb": 999999}}, "quotas.memory_mb"),
        ({"name": "tpl-x", "from": "python", "quotas": {"timeout_s": 86000}}, "quotas.timeout_s"),
        ({"name": "tpl-x", "from": "python", "quotas": {"image_mb": 5000}}, "quotas.image_mb"),
        (
            {"name": "tpl-x", "from": "python", "network": {"allow": ["10.0.0.1"]}},
            "network.allow[0]",
        ),
        ({"name": "tpl-x", "from": "python", "steps": [{"run": "true"}] * 65}, "steps"),
        ({"name": "tpl-x", "from": "python", "steps": [{"copy": {"/big": "x" * 70000}}]}, "steps"),
    ],
)
def test_bad_templates_are_422_naming_the_field(
    grid: LocalGrid, body: dict[str, Any], field: str
) -> None:
    resp = call("POST", "/v1/templates", body={"steps": [{"run": "true"}], **body})
    assert resp.status_code == 422, resp.text
    assert field in resp.text, resp.text


def test_a_tenant_without_network_gets_422_for_a_build_policy(grid: LocalGrid) -> None:
    body = {"name": "tpl-g2", "from": "python", "steps": [{"run": "true"}], "network": PIP_POLICY}
    resp = call("POST", "/v1/templates", GLOBEX, body)
    assert resp.status_code == 422 and "network" in resp.text, resp.text


def test_a_builds_log_streams_as_it_runs_and_a_failure_ends_with_its_exit_code(
    grid: LocalGrid,
) -> None:
    steps = [{"run": "echo first-line; sleep 3; echo second-line; exit 4"}]
    resp = call(
        "POST", "/v1/templates", body={"name": "tpl-stream", "from": "python", "steps": steps}
    )
    assert resp.status_code == 202, resp.text
    parser, events, seen_at = SSEParser(), [], {}
    headers = {"Authorization": f"Bearer {ACME}"}
    url = f"http://127.0.0.1:{PORT}/v1/templates/tpl-stream/logs?follow=1"
    with httpx.stream("GET", url, headers=headers, timeout=300) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            events.append(event)
            for word in ("first-line", "second-line"):
                if event.data.startswith(word):  # the output, not the step header
                    seen_at.setdefault(word, time.monotonic())
            if event.final:
                break
    assert seen_at["second-line"] - seen_at["first-line"] > 2  # live, not all at the end
    last = events[-1]
    assert last.type == "error" and last.error is not None, last
    assert last.error["context"]["exit_code"] == 4 and last.error["context"]["failed_step"] == 0
    assert last.template is not None and last.template["state"] == "failed"
    text = call("GET", "/v1/templates/tpl-stream/logs")
    assert "first-line" in text.text and "second-line" in text.text
    assert leftovers("tpl-stream") == ([], [])
    assert call("GET", "/v1/templates/tpl-stream/logs", GLOBEX).status_code == 404


def test_publish_then_delete_a_template_409_while_in_use(grid: LocalGrid) -> None:
    if call("GET", "/v1/templates/tpl-demo").json().get("state") != "ready":
        build(
            grid,
            {"name": "tpl-demo", "from": "python", "steps": [{"run": PIP}], "network": PIP_POLICY},
        )
    info = call("GET", "/v1/templates/tpl-demo").json()
    assert call("POST", "/v1/templates/tpl-demo/publish", ACME).status_code == 401
    published = call("POST", "/v1/templates/tpl-demo/publish", ADMIN)
    assert published.status_code == 200 and published.json()["tenant"] is None, published.text
    assert call("GET", "/v1/types/tpl-demo", GLOBEX).status_code == 200  # now every tenant's
    grid.wait(lambda: call("GET", "/v1/types/tpl-demo").json()["nodes"] == [NODE], "node serves it")
    sid = call("POST", "/v1/sessions", GLOBEX, {"type": "tpl-demo"}).json()["id"]
    refused = call("DELETE", "/v1/templates/tpl-demo")
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["context"]["sessions"] == 1
    assert call("DELETE", f"/v1/sessions/{sid}", GLOBEX).status_code == 200
    assert call("DELETE", "/v1/templates/tpl-demo", GLOBEX).status_code == 404  # not its own
    gone = call("DELETE", "/v1/templates/tpl-demo")
    assert gone.status_code == 200, gone.text
    assert call("GET", "/v1/templates/tpl-demo").status_code == 404
    assert call("GET", "/v1/types/tpl-demo").status_code == 404
    assert call("POST", "/v1/sessions", body={"type": "tpl-demo"}).status_code == 404
    host, _, rest = info["image"].partition("/")
    repo = rest.rsplit(":", 1)[0]
    head = httpx.head(f"http://{host}/v2/{repo}/manifests/{info['digest']}", timeout=10)
    assert head.status_code == 404, head.status_code  # the registry's tag is gone too


def test_a_template_from_an_image_of_the_registry(grid: LocalGrid) -> None:
    ref = "127.0.0.1:5000/sandgrid/sandbox-python:latest"
    body = {"name": "tpl-fromimg", "from": ref, "steps": [{"run": "echo built > /built"}]}
    done = build(grid, body)
    assert done["state"] == "ready" and done["base"] == ref, done
    grid.wait(lambda: call("GET", "/v1/types/tpl-fromimg").json()["nodes"] == [NODE], "served")
    sid = call("POST", "/v1/sessions", body={"type": "tpl-fromimg"}).json()["id"]
    out = call("POST", f"/v1/sessions/{sid}/exec", body={"shell": "cat /built"}).json()
    assert out["stdout"] == "built\n", out
    call("DELETE", f"/v1/sessions/{sid}")
    assert call("DELETE", "/v1/templates/tpl-fromimg").status_code == 200

    missing = {**body, "name": "tpl-noimg", "from": "sandgrid/no-such-image:v9"}
    refused = call("POST", "/v1/templates", body=missing)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["context"]["field"] == "from"
    assert "no image sandgrid/no-such-image:v9 in the grid's registry" in refused.text


def test_a_registry_image_without_python3_is_refused_saying_so(grid: LocalGrid) -> None:
    repo, digest = _bare_image()
    try:
        body = {"name": "tpl-bareimg", "from": f"{repo}:v1", "steps": [{"run": "true"}]}
        done = build(grid, body)
        assert done["state"] == "failed", done
        assert "the base image has no python3: the in-sandbox agent needs python3" in done["error"]
        assert leftovers("tpl-bareimg") == ([], [])
    finally:
        httpx.delete(f"http://127.0.0.1:5000/v2/{repo}/manifests/{digest}", timeout=30)
        pulled = f"127.0.0.1:5000/{repo}@{digest}"  # the build's node pulled it
        subprocess.run(["docker", "rmi", "-f", pulled], capture_output=True, check=False)


def _bare_image() -> tuple[str, str]:
    """A one-file image with no python3, pushed to the grid's registry: (repository, digest)."""
    repo = f"sandgrid/tpl-bare-{uuid.uuid4().hex[:8]}"
    ref = f"127.0.0.1:5000/{repo}:v1"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    run = functools.partial(subprocess.run, check=True, capture_output=True, timeout=120)
    run(["docker", "import", "-", ref], input=buf.getvalue())
    run(["docker", "push", "-q", ref])
    digests = run(["docker", "image", "inspect", "-f", "{{json .RepoDigests}}", ref], text=True)
    run(["docker", "rmi", ref])
    return repo, json.loads(digests.stdout)[0].split("@", 1)[1]
