"""What a sandbox is told about its egress proxy: the mount, the socket, the variables.

Every sandbox gets the proxy variables (a warm container exists before its
session's policy is known, and a policy may be set later on a live session);
a session without a policy is refused by the proxy with a clear message.
``PIP_NO_INDEX`` (set to 1 by the image, so that an offline pip fails fast) is
cleared per exec for sessions that have a policy.
"""

from __future__ import annotations

from sandgrid.models import SessionInfo

__all__ = ["MOUNT", "NO_PROXY", "SOCKET_NAME", "proxy_env", "session_env"]

#: Where the sandbox's egress directory is mounted (read-only) in the sandbox.
MOUNT = "/run/sandgrid-egress"
#: The Unix socket of the host proxy in that directory.
SOCKET_NAME = "proxy.sock"
NO_PROXY = "localhost,127.0.0.1,::1"


def proxy_env(port: int) -> dict[str, str]:
    """The proxy variables of every sandbox, both spellings (curl reads only lower case)."""
    http = f"http://127.0.0.1:{port}"
    socks = f"socks5h://127.0.0.1:{port}"
    env = {"HTTP_PROXY": http, "HTTPS_PROXY": http, "ALL_PROXY": socks, "NO_PROXY": NO_PROXY}
    return {**env, **{k.lower(): v for k, v in env.items()}}


def session_env(info: SessionInfo) -> dict[str, str]:
    """Per-exec variables of a session: pip may use an index once a policy exists."""
    return {"PIP_NO_INDEX": "0"} if info.network is not None else {}
