"""An image's digest, from the grid's Docker engine: what a type pins besides its tag.

A type names its image by tag and by digest (``SandboxTypeSpec.digest``). When
it is seeded or added without one, the digest is read from the engine the API
can reach (``DOCKER_HOST``, else ``/var/run/docker.sock``), over the engine's
HTTP API with httpx (the control plane does not import the Docker SDK): the
registry digest when the image came from (or went to) a registry, else the
local image id. An engine that is not there, or an image it does not have,
gives ``""``: the caller decides whether that is an error (``POST /v1/types``)
or a warning (seeding a file whose benchmark image is not built).
"""

from __future__ import annotations

import os
import re
from urllib.parse import quote

import httpx

__all__ = ["DEFAULT_DOCKER_SOCKET", "engine_socket", "resolve_digest"]

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
#: An engine that does not answer in this long is taken as absent (s).
_TIMEOUT_S = 5.0


def engine_socket(docker_host: str | None = None) -> str | None:
    """The engine's Unix socket (``DOCKER_HOST`` when it is one); None: not a Unix socket."""
    host = docker_host if docker_host is not None else os.environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_DOCKER_SOCKET
    return host.removeprefix("unix://") if host.startswith("unix://") else None


def resolve_digest(image: str, *, docker_host: str | None = None) -> str:
    """The digest of ``image`` on the engine (registry digest, else image id), or ``""``."""
    sock = engine_socket(docker_host)
    if sock is None or not os.path.exists(sock):
        return ""
    transport = httpx.HTTPTransport(uds=sock)
    try:
        with httpx.Client(transport=transport, timeout=_TIMEOUT_S) as client:
            reply = client.get(f"http://docker/images/{quote(image, safe='')}/json")
    except httpx.HTTPError:
        return ""
    if reply.status_code != 200:
        return ""
    facts = reply.json()
    for ref in facts.get("RepoDigests") or []:
        if (found := _DIGEST.search(str(ref))) is not None:
            return found.group(0)
    image_id = str(facts.get("Id", ""))
    return image_id if _DIGEST.fullmatch(image_id) else ""
