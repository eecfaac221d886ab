"""Prepared statements for the hot path only (docs/decisions.md, "Prepared statements").

With `DATABASE_PREPARED_STATEMENTS=hot` (the default on PostgreSQL), PostgreSQL binds every
statement's parameters on the server (`server_side_binding`), but psycopg prepares none by
default (`prepare_threshold=None`). Inside `hot_path_statements()` it prepares a statement the
sixth time the connection runs it, so the pull's and the reports' statements — the same few
texts run per agenda, by primary key or by the queue's own index — are parsed and planned once
per connection. Lists and pages never run inside it, and a fill suspends it
(`unprepared_statements`): after five runs PostgreSQL may plan a prepared statement
generically, and a generic plan loses where the best plan depends on the values — a filtered
list over a long, skewed history, or a fill's pick among lanes once one customer's backlog
becomes eleven customers' (bench.fairness: the flooder kept 0.64 of its solo rate instead of
0.94). Generic plans also keep the picture of the tables they were made on until an ANALYZE
replaces it: `hot` wants autovacuum on (a report's lock read planned on an executions table
analyzed while empty scanned it whole as it grew).

`DATABASE_PREPARED_STATEMENTS` (settings.POP_PREPARED_STATEMENTS) chooses: `hot` (this, the
default), `off` (client-side binding, nothing prepared, both blocks change nothing) or `all`
(every statement, psycopg's own threshold).

One hot statement, the pull's claim, is told to keep its generic plan (`generic_plan`):
left to choose, PostgreSQL planned it with its values at about half of its runs, 1.1 ms of
planning each time (docs/decisions.md, "The claim keeps its generic plan").
"""

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

#: psycopg's default: the sixth run of a statement on a connection prepares it.
HOT_PATH_THRESHOLD = 5


@contextmanager
def hot_path_statements() -> Iterator[None]:
    """Prepare the statements run inside (on this thread's connection) from their sixth run."""
    if settings.POP_PREPARED_STATEMENTS != "hot" or connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with _prepare_threshold(HOT_PATH_THRESHOLD):
        yield


@contextmanager
def unprepared_statements() -> Iterator[None]:
    """Inside `hot_path_statements()`, a block whose statements are planned with their values
    every time (nothing prepared, nothing prepared used)."""
    if connection.vendor != "postgresql" or connection.connection is None:
        yield
        return
    with _prepare_threshold(None):
        yield


@contextmanager
def _prepare_threshold(threshold: int | None) -> Iterator[None]:
    """psycopg's `prepare_threshold` of this thread's open connection, for the block."""
    raw = connection.connection
    previous = raw.prepare_threshold
    raw.prepare_threshold = threshold
    try:
        yield
    finally:
        raw.prepare_threshold = previous


_PLAN_CACHE_MODE_SQL = (
    "SELECT current_setting('plan_cache_mode'), "
    "set_config('plan_cache_mode', 'force_generic_plan', true)"
)


@contextmanager
def generic_plan(*, transaction_ends_after: bool = False) -> Iterator[None]:
    """Inside a transaction, the prepared statements run in the block use their generic plan,
    made once per connection (and again after an ANALYZE of their tables), never one planned
    with their values: `plan_cache_mode` is set for the transaction, then set back after the
    block, unless `transaction_ends_after` (the caller commits or rolls back next; the
    setting ends with the transaction). One statement, two when set back.

    Only where statements are prepared (inside `hot_path_statements()`, or with `all`):
    elsewhere the setting would plan each unprepared statement without its values. The block
    must hold only statements whose best plan does not depend on their values (the claim; the
    callback outbox's INSERTs it may write): PostgreSQL also plans a statement bound on the
    server but not prepared without its values under the setting (a list, a fill)."""
    raw = connection.connection if connection.vendor == "postgresql" else None
    if raw is None or raw.prepare_threshold is None or not connection.in_atomic_block:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(_PLAN_CACHE_MODE_SQL)
        (previous, _) = cursor.fetchone()
    yield  # an error leaves the transaction to roll back, and the setting with it
    if not transaction_ends_after:
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('plan_cache_mode', %s, true)", [previous])
