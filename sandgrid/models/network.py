"""A session's network: its egress policy, the attempts the proxy recorded, the view of both."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from sandgrid.models.base import MAX_NETWORK_BYTES, MAX_NETWORK_ENTRIES, WireModel
from sandgrid.network import parse_entries

__all__ = ["EgressLimits", "NetworkAttempt", "NetworkPolicy", "NetworkView"]


def _rules(field: str, entries: list[str]) -> list[str]:
    return parse_entries(f"network.{field}", entries)


class NetworkPolicy(WireModel):
    """What a session may reach (docs/network.md). None on a session: no network.

    Entries are ``HOST[:PORT]``: a name, ``*.domain``, ``*``, an address or a
    range (``sandgrid.network``). Deny wins over allow; loopback, private,
    link-local and metadata addresses need an allow entry that names their range.
    """

    allow: list[str] = Field(default_factory=list, max_length=MAX_NETWORK_ENTRIES)
    deny: list[str] = Field(default_factory=list, max_length=MAX_NETWORK_ENTRIES)
    max_connections: int = Field(
        10_000, ge=0, le=10_000_000, description="connections the session may open in its life"
    )
    max_bytes: int = Field(
        4 << 30, ge=0, le=1 << 50, description="bytes both ways the session may move in its life"
    )

    @field_validator("allow")
    @classmethod
    def _allow(cls, v: list[str]) -> list[str]:
        return _rules("allow", v)

    @field_validator("deny")
    @classmethod
    def _deny(cls, v: list[str]) -> list[str]:
        return _rules("deny", v)

    @model_validator(mode="after")
    def _bounded(self) -> NetworkPolicy:
        size = len(self.model_dump_json())
        if size > MAX_NETWORK_BYTES:
            raise ValueError(
                f"network policy is {size} bytes as JSON; at most {MAX_NETWORK_BYTES} are allowed"
            )
        return self


class NetworkAttempt(WireModel):
    """One connection attempt of a session, as the worker's egress proxy recorded it."""

    ts: float = Field(description="when it was attempted (Unix time)")
    host: str
    port: int
    address: str = Field("", description="the resolved address connected to (or refused)")
    resolved: bool = Field(
        False,
        description="whether the proxy looked the name up (never for an IP literal, nor for "
        "a name refused before resolution: no policy, or no allow entry could match it)",
    )
    allowed: bool
    rule: str = Field("", description="the entry (or special range) that decided it")
    reason: str = ""
    protocol: str = Field("", description="connect, http or socks5")
    sent: int = Field(0, description="bytes from the sandbox")
    received: int = Field(0, description="bytes to the sandbox")
    duration_ms: float = 0.0
    node: str = ""


class EgressLimits(WireModel):
    """The connection limits the egress proxy holds every connection to (node settings)."""

    handshake_timeout_s: float = Field(description="the request must arrive within this")
    idle_timeout_s: float = Field(description="an established connection idle this long closes")
    max_open: int = Field(description="connections of the session open at once")


class NetworkView(WireModel):
    """Body of ``GET /v1/sessions/{id}/network``: the policy, usage and recent attempts."""

    policy: NetworkPolicy | None
    connections: int = 0
    bytes: int = 0
    attempts: list[NetworkAttempt] = Field(default_factory=list)
    limits: EgressLimits | None = Field(
        None, description="the proxy's connection limits (as its node last said, else the grid's)"
    )
