"""Per-insight fill lock (DESIGN §5.1) and the one place that asks which database this is.

On PostgreSQL the lock is a transaction-scoped advisory *try*-lock: a second filler of the
same insight skips at once instead of queueing behind the first, and the lock goes away
with the transaction (commit, rollback or a dropped connection), so it can never leak.
On SQLite every write transaction starts with `BEGIN IMMEDIATE` (popsite/settings.py), which
already serialises writers, so the fallback simply grants the lock.
"""

import zlib

from django.db import connection

# First key of the two-int advisory lock form: keeps POP's locks apart from anyone else's.
FILL_LOCK_NAMESPACE = 0x504F5046  # "POPF"


def database_is_postgresql() -> bool:
    """Whether PostgreSQL-only statements (advisory locks, LATERAL, SKIP LOCKED) are available."""
    return connection.vendor == "postgresql"


def insight_lock_key(insight_id: object) -> int:
    """A stable signed 32-bit key for the insight (advisory locks take int4 pairs)."""
    return zlib.crc32(str(insight_id).encode()) - 2**31


def insight_fill_try_lock(insight_id: object) -> bool:
    """Take the insight's fill lock for the current transaction; False when another holds it."""
    if not connection.in_atomic_block:
        raise RuntimeError("insight_fill_try_lock() must run inside transaction.atomic()")
    if not database_is_postgresql():
        return True
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(%s, %s)",
            [FILL_LOCK_NAMESPACE, insight_lock_key(insight_id)],
        )
        return bool(cursor.fetchone()[0])
