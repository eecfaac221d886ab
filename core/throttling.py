"""API throttles that count requests per fixed window in one statement.

DRF's `SimpleRateThrottle` keeps every request's timestamp of the last period in the cache and
rewrites the whole list on every request. With the database cache that was six statements and
a commit per request, a `COUNT(*)` over the cache table, and a pickled list as long as the
requests of the last minute (a puller at 60 requests/s: 3,600 timestamps, ~3 ms a request,
growing with the rate). These throttles keep one counter per key and window instead: an
`INSERT … ON CONFLICT … RETURNING` on `pop_throttle` (unlogged on PostgreSQL: no WAL, no
flush at commit; popsite/migrations/0002_throttle_counters.py), or Redis `INCR` when
POP_CACHE_URL names one. A fixed window lets a caller make up to twice its rate across a
window's edge; `Retry-After` is the time to the window's end (docs/decisions.md,
"Throttles count per window").
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from rest_framework import throttling

THROTTLE_TABLE = "pop_throttle"

HIT = f"""
INSERT INTO {THROTTLE_TABLE} (key, window_number, hits, expires_at)
VALUES (%s, %s, 1, %s)
ON CONFLICT (key) DO UPDATE SET
    hits = CASE WHEN {THROTTLE_TABLE}.window_number = excluded.window_number
                THEN {THROTTLE_TABLE}.hits + 1 ELSE 1 END,
    window_number = excluded.window_number,
    expires_at = excluded.expires_at
RETURNING hits
"""


MAX_KEY_LENGTH = 200  # the column holds 255; a longer key (an odd client address) is hashed


def window_hit(key: str, *, window: int, expires_at: float) -> int:
    """Count one request for `key` in `window` (which ends at `expires_at`, Unix seconds);
    return the requests counted in that window so far, this one included."""
    if len(key) > MAX_KEY_LENGTH:
        key = "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    if settings.POP_CACHE_URL:  # Redis: atomic INCR of a key that expires with its window
        counted = f"{key}:{window}"
        cache.add(counted, 0, timeout=max(1, int(expires_at - time.time()) + 1))
        return cache.incr(counted)
    with connection.cursor() as cursor:
        cursor.execute(HIT, [key, window, expires_at])
        return cursor.fetchone()[0]


def throttle_counters_prune(*, now: float | None = None) -> int:
    """Delete the counters of windows that have ended (a client address seen once keeps a
    row until then); run with the reap. Returns how many went."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {THROTTLE_TABLE} WHERE expires_at < %s",
            [time.time() if now is None else now],
        )
        return cursor.rowcount


def throttle_counters_clear() -> None:
    """Every counter (tests start from none)."""
    if settings.POP_CACHE_URL:
        cache.clear()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {THROTTLE_TABLE}")


class WindowCountThrottle(throttling.SimpleRateThrottle):
    """`SimpleRateThrottle` with one counter per key and fixed window (module docstring)."""

    window_end: float = 0.0

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        self.now = self.timer()
        window = int(self.now // self.duration)
        self.window_end = (window + 1) * self.duration
        hits = window_hit(self.key, window=window, expires_at=self.window_end)
        return hits <= self.num_requests

    def wait(self) -> float | None:
        return max(0.0, self.window_end - self.now)


class AnonRateThrottle(WindowCountThrottle, throttling.AnonRateThrottle):
    """Requests without a user, per client address (POP_THROTTLE_ANON)."""


class UserRateThrottle(WindowCountThrottle, throttling.UserRateThrottle):
    """Requests per user, or per address without one (POP_THROTTLE_USER)."""
