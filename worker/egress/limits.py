"""The connection limits of the egress proxy (23.8): no connection holds a socket unbounded.

``handshake_timeout_s``: the request must arrive within it (``Handler.serve``);
``idle_timeout_s``: an established connection with no byte either way for it
is closed (``Handler._pipe``, both relay paths); ``max_open``: connections of
one sandbox open at once, counted from accept (``EgressProxy``). Node
settings (``SANDGRID_WORKER__EGRESS__*``), shown in ``GET
/v1/sessions/{id}/network`` as ``limits``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandgrid.models import EgressLimits
from sandgrid.wire.settings import EgressSettings

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """How long and how many: what keeps a connection from holding a socket unbounded."""

    handshake_timeout_s: float = 10.0
    idle_timeout_s: float = 600.0
    max_open: int = 128

    @classmethod
    def from_settings(cls, egress: EgressSettings) -> Limits:
        return cls(egress.handshake_timeout_s, egress.idle_timeout_s, egress.max_open)

    def shown(self) -> EgressLimits:
        """As ``GET /v1/sessions/{id}/network`` shows them."""
        return EgressLimits(
            handshake_timeout_s=self.handshake_timeout_s,
            idle_timeout_s=self.idle_timeout_s,
            max_open=self.max_open,
        )
