"""When the SDK tries a call again: ``RetryPolicy`` decides, the shells only sleep.

What is retried is what cannot run anything twice:

- a request that never reached the API (connection refused or timed out);
- 429 (backpressure, a tenant's turn ceiling): the API refused before doing
  anything, and says when to come back (``Retry-After``);
- 503 ``no_capacity`` with a ``retry_after`` (no live worker serves the type
  yet, one restarting, say): the API refused at admission, before doing anything;
- 503 ``registry_unavailable`` / ``store_unavailable`` (or a connection that broke
  after the request was sent) only for calls that are safe to repeat: GET and
  DELETE, and exec, which carries an ``Idempotency-Key`` (one per call, the same
  on each of its retries; pass your own to make an exec idempotent across
  processes): a retried exec answers the first run's result, never runs twice.

Other writes (session create, file writes, tar upload, batch create) carry no
key and are not retried after the API may have acted on them: the caller sees
the 503 and decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandgrid.client._call import Call
from sandgrid.errors import UNAVAILABLE_CODES, ErrorCode, LimitExceeded, SandgridError

__all__ = ["DEFAULT_RETRIES", "RetryPolicy", "Retrying"]

#: Retries of a call, when safe (``RetryPolicy``).
DEFAULT_RETRIES = 3


@dataclass(frozen=True)
class RetryPolicy:
    """How the SDK retries what is safe to retry (see the module doc).

    Attributes:
        attempts: tries in all, the first included (1: never retry).
        backoff_s: the first wait; each next one doubles.
        max_wait_s: the cap of one wait, a server's ``Retry-After`` included; a
            429 that asks for longer is not retried.
        total_s: the cap of all waits of one call together.
    """

    attempts: int = 1 + DEFAULT_RETRIES
    backoff_s: float = 0.25
    max_wait_s: float = 4.0
    total_s: float = 20.0

    @classmethod
    def of(cls, retries: RetryPolicy | int) -> RetryPolicy:
        """A policy from ``Client(retries=...)``: a policy, or how many retries."""
        return retries if isinstance(retries, RetryPolicy) else cls(attempts=1 + max(0, retries))

    def retrying(self, call: Call[Any]) -> Retrying:
        """The tries of one send of ``call``."""
        return Retrying(self, call)

    def delay(
        self, call: Call[Any], error: SandgridError, tries: int, waited: float
    ) -> float | None:
        """Seconds to wait before trying ``call`` again after ``error``, or None.

        Args:
            call: the call that failed.
            error: how it failed (a transport error, or the server's error).
            tries: how many tries were made.
            waited: the seconds already waited between them.
        """
        hint = _retry_hint(call, error)
        if hint is None or tries >= self.attempts:
            return None
        wait = max(hint, self.backoff_s * 2 ** (tries - 1))
        if isinstance(error, LimitExceeded) and hint > self.max_wait_s:
            return None
        wait = min(wait, self.max_wait_s, self.total_s - waited)
        return wait if wait > 0 else None


class Retrying:
    """The tries of one call so far: what a shell's send loop asks after each failure."""

    def __init__(self, policy: RetryPolicy, call: Call[Any]) -> None:
        self.policy, self.call = policy, call
        self.tries, self.waited = 1, 0.0

    def wait_after(self, error: SandgridError) -> float:
        """Seconds to sleep before the next try after ``error``; ``error`` raised when
        the call is not to be tried again."""
        delay = self.policy.delay(self.call, error, self.tries, self.waited)
        if delay is None:
            raise error
        self.tries, self.waited = self.tries + 1, self.waited + delay
        return delay


def _retry_hint(call: Call[Any], error: SandgridError) -> float | None:
    """The server's wait hint when ``error`` is safe to retry for ``call``, else None."""
    hint = float(error.context.get("retry_after", 0.0) or 0.0)
    if error.code == ErrorCode.API_UNREACHABLE:
        return hint if call.idempotent or not error.context.get("request_sent", True) else None
    if isinstance(error, LimitExceeded):
        return hint
    if error.code == ErrorCode.NO_CAPACITY and hint > 0:  # refused at admission (see above)
        return hint
    if error.code in UNAVAILABLE_CODES and call.idempotent:
        return hint
    return None
