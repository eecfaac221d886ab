"""Per-insight fill lock and per-customer cap locks (docs/design.md §6.1), single-flight locks
for slow tasks, and the one place that asks which database this is.

On PostgreSQL the lock is a transaction-scoped advisory lock: the cluster's fills *try* it (a
second filler of the same insight skips at once instead of queueing behind the first), a pull
that fills inline waits for it (`insight_fill_lock`: it wants the rows that fill moves), and
it goes away with the transaction (commit, rollback or a dropped connection), so it can never
leak.
On SQLite every write transaction starts with `BEGIN IMMEDIATE` (popsite/settings.py), which
already serialises writers, so the fallback simply grants the lock.
"""

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import OperationalError, connection
from psycopg.errors import LockNotAvailable

# First key of the two-int advisory lock form: keeps POP's locks apart from anyone else's.
FILL_LOCK_NAMESPACE = 0x504F5046  # "POPF"


def database_is_postgresql() -> bool:
    """Whether PostgreSQL-only statements (advisory locks, LATERAL, SKIP LOCKED) are available."""
    return connection.vendor == "postgresql"


def insight_lock_key(row_id: object) -> int:
    """A stable signed 32-bit key for a row id (advisory locks take int4 pairs)."""
    return zlib.crc32(str(row_id).encode()) - 2**31


def insight_fill_try_lock(insight_id: object) -> bool:
    """Take the insight's fill lock for the current transaction; False when another holds it."""
    if not connection.in_atomic_block:
        raise RuntimeError("insight_fill_try_lock() must run inside transaction.atomic()")
    if not database_is_postgresql():
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", fill_lock_key(insight_id))
        return bool(cursor.fetchone()[0])


def fill_lock_key(insight_id: object) -> list[int]:
    """The two int4 keys of the insight's fill lock (the parameters of `FILL_LOCK_WAITERS_SQL`
    too)."""
    return [FILL_LOCK_NAMESPACE, insight_lock_key(insight_id)]


# A scalar subquery counting the transactions of this database waiting for an insight's fill
# lock now, its parameters `fill_lock_key(insight_id)`: the pulls queued behind an inline fill
# (`insight_fill_lock`; the cluster's fills only try it). PostgreSQL only: pg_locks shows an
# int4-pair advisory lock as (classid, objid) with objsubid 2.
FILL_LOCK_WAITERS_SQL = (
    "(SELECT COUNT(*) FROM pg_locks w WHERE w.locktype = 'advisory' AND NOT w.granted "
    "AND w.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database()) "
    "AND w.classid = %s::int::oid AND w.objid = %s::int::oid AND w.objsubid = 2)"
)


class FillLockTimeout(Exception):
    """`insight_fill_lock` waited its limit; the transaction it ran in is aborted."""


def insight_fill_lock(insight_id: object, *, timeout_seconds: float) -> None:
    """Wait up to `timeout_seconds` for the insight's fill lock, then hold it until the
    transaction ends (a pull's inline fill: it queues behind a rival's fill rather than skip
    it). The limit is the transaction's `lock_timeout` for this one statement, put back once the
    lock is held. A wait that reaches it aborts the transaction and raises `FillLockTimeout`:
    take this lock first in a transaction of its own."""
    if not connection.in_atomic_block:
        raise RuntimeError("insight_fill_lock() must run inside transaction.atomic()")
    if not database_is_postgresql():
        return
    limit = f"{max(1, round(timeout_seconds * 1000))}ms"
    with connection.cursor() as cursor:
        try:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, %s) "
                "FROM (SELECT set_config('lock_timeout', %s, true)) AS timeout",
                [*fill_lock_key(insight_id), limit],
            )
        except OperationalError as error:
            if isinstance(error.__cause__, LockNotAvailable):  # lock_timeout reached
                raise FillLockTimeout(
                    f"insight {insight_id}: fill lock not free in {limit}"
                ) from error
            raise
        cursor.execute("SET LOCAL lock_timeout TO DEFAULT")


# First key of the per-customer cap locks (max_executing across every insight and node).
CAP_LOCK_NAMESPACE = 0x504F5043  # "POPC"


def customer_cap_locks(customer_ids: list[object]) -> None:
    """Wait for, and hold until the transaction ends, the cap lock of each customer: fills of
    different insights that admit work of the same capped customer take turns, so each counts
    what the other admitted. Keys are taken in sorted order (no deadlock between two fills)."""
    if not connection.in_atomic_block:
        raise RuntimeError("customer_cap_locks() must run inside transaction.atomic()")
    if not database_is_postgresql() or not customer_ids:
        return
    keys = sorted({insight_lock_key(customer_id) for customer_id in customer_ids})
    with connection.cursor() as cursor:
        for key in keys:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [CAP_LOCK_NAMESPACE, key])


# First key of the session-level single-flight locks (one running copy of a slow task).
SINGLE_FLIGHT_NAMESPACE = 0x504F5053  # "POPS"


@contextmanager
def single_flight(name: str) -> Iterator[bool]:
    """Yield True when no other process runs `name` now (and hold that until the block ends),
    False when one does.

    For the enqueued tasks that may block on the network (callbacks, alert notices): a new
    copy is enqueued every period, and without this a dead receiver would let copies pile up
    until they held every cluster worker, starving fill nudges, time-outs and reaps. The lock
    is a PostgreSQL session-level advisory try-lock, released in `finally` or, if the process
    dies, with its connection. On SQLite (the single-node demo) it is always granted.
    """
    if not database_is_postgresql():
        yield True
        return
    key = [SINGLE_FLIGHT_NAMESPACE, zlib.crc32(name.encode()) - 2**31]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", key)
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", key)
