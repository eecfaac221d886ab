"""A worker's own clock for the lease of one execution (docs/design.md §6.3).

The server starts a lease no earlier than the worker sent the pull, and renews it no earlier
than the worker sent the report, each time for `seconds`; so the lease surely holds until
`sent + seconds` on the worker's monotonic clock, whatever the two wall clocks say. No
operation starts unless more than a third of it is left (:meth:`LeaseClock.fresh`); the
runner asks for a renewal first (:class:`LeaseGate`), and a lease that runs out before a
renewal is answered is lost: its handlers are cancelled.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Protocol


class LeaseGate(Protocol):
    """The lease an agenda runs under, as a :class:`~popclient.dag.DagRunner` asks about it."""

    def fresh(self) -> bool:
        """Whether an operation may start now; never blocks."""

    def renew(self) -> None:
        """Try to renew the lease now (a heartbeat); may block on the network. Losing the
        lease cancels the runner."""


class LeaseClock:
    """Until when a lease of `seconds` surely holds, on this machine's monotonic clock."""

    def __init__(self, seconds: float, *, holds_until: float) -> None:
        self.seconds = max(1.0, seconds)
        self.deadline = holds_until
        self.lost = False

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def renewed(self, sent_at: float) -> None:
        """A report sent at `sent_at` (monotonic) was answered with a live lease."""
        self.deadline = max(self.deadline, sent_at + self.seconds)

    def fresh(self) -> bool:
        """More than a third of the lease is left, and it was not lost."""
        return not self.lost and self.left() > self.seconds / 3


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def seconds_until(value: Any) -> float | None:
    expires = parse_time(value)
    if expires is None:
        return None
    return (expires - datetime.now(UTC)).total_seconds()
