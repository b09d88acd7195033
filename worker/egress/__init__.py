"""The host side of the network policy: one egress proxy per worker node.

``EgressProxy`` (``proxy``) serves one Unix socket per sandbox and runs each
connection through ``handler`` (HTTP CONNECT, plain HTTP proxying, SOCKS5),
deciding it with ``sandgrid.network.decide`` over the session's live policy;
``book`` is where policies are read and attempts and usage are written (Redis),
``resolver`` resolves names on the host (with a test-only override), and
``env`` is what a sandbox is told about its proxy. docs/network.md.
"""

from __future__ import annotations

from worker.egress.book import EgressBook, RedisBook
from worker.egress.env import MOUNT, SOCKET_NAME, proxy_env, session_env
from worker.egress.proxy import EgressProxy
from worker.egress.resolver import Resolver

__all__ = [
    "MOUNT",
    "SOCKET_NAME",
    "EgressBook",
    "EgressProxy",
    "RedisBook",
    "Resolver",
    "proxy_env",
    "session_env",
]
