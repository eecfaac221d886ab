"""Figures read back from a phase's database after it ran: agendas pulled twice, states,
sessions opened, and rates and latencies from the rows' own timestamps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import psycopg

from bench.common import ADMIN_DB, dsn, percentile


def pulled_twice(dbname: str) -> int:
    """Agendas with two executions of the same attempt number (pulled twice in one attempt)."""
    with psycopg.connect(dsn(dbname)) as conn:
        return conn.execute(
            "SELECT count(*) FROM (SELECT agenda_id, number FROM agendas_execution "
            "GROUP BY agenda_id, number HAVING count(*) > 1) twice"
        ).fetchone()[0]


def state_counts(dbname: str) -> dict[str, int]:
    with psycopg.connect(dsn(dbname)) as conn:
        return dict(
            conn.execute("SELECT state, count(*) FROM agendas_agendaprogress GROUP BY state")
        )


def sessions_opened(dbname: str) -> int:
    """Connections ever opened to `dbname` (PostgreSQL 14+ counts them per database)."""
    with psycopg.connect(dsn(ADMIN_DB)) as conn:
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = %s", [dbname]
        ).fetchone()
    return int(row[0]) if row else 0


# A backend sends its counters to pg_stat_database at most once a second, and within a second
# of going idle: read them this long after the work stopped.
STATS_FLUSH_SECONDS = 1.5


def buffers_touched(dbname: str) -> int:
    """Shared buffers read or found in `dbname` so far, by every backend (each page an
    executor, a trigger or a vacuum touched, once per touch): work that, unlike CPU time,
    another process's load does not inflate. Sleep STATS_FLUSH_SECONDS after the work first."""
    with psycopg.connect(dsn(ADMIN_DB)) as conn:
        row = conn.execute(
            "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = %s", [dbname]
        ).fetchone()
    return int(row[0]) if row else 0


def wal_written() -> int:
    """Bytes of WAL the server has written so far (its current position)."""
    with psycopg.connect(dsn(ADMIN_DB)) as conn:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def timings(
    dbname: str, *, customer_ids: Sequence[str] | None = None, created_after: float | None = None
) -> dict[str, float]:
    """From database timestamps, over agendas that reached a terminal state only: count,
    agendas/s (count over first submit → last completion), submit→pull and submit→complete
    p50/p99 in ms."""
    where = "p.state IN ('succeeded', 'failed', 'aborted')"
    params: list[Any] = []
    if customer_ids:
        where += " AND a.customer_id = ANY(%s::uuid[])"
        params.append(list(customer_ids))
    if created_after is not None:
        where += " AND a.created_at >= to_timestamp(%s)"
        params.append(created_after)
    with psycopg.connect(dsn(dbname)) as conn:
        rows = conn.execute(
            f"""
            SELECT extract(epoch FROM a.created_at), extract(epoch FROM e.started_at),
                   extract(epoch FROM p.completed_at)
            FROM agendas_agenda a
            JOIN agendas_agendaprogress p ON p.agenda_id = a.id
            JOIN agendas_execution e ON e.agenda_id = a.id AND e.number = 1
            WHERE {where}
            """,
            params,
        ).fetchall()
    if not rows:
        return {"terminal": 0}
    created = [float(r[0]) for r in rows]
    pulled = [float(r[1]) for r in rows]
    completed = [float(r[2]) for r in rows]
    span = max(completed) - min(created)
    to_pull = [(p - c) * 1000 for c, p in zip(created, pulled, strict=True)]
    to_done = [(d - c) * 1000 for c, d in zip(created, completed, strict=True)]
    return {
        "terminal": len(rows),
        "seconds": span,
        "rate": len(rows) / span if span > 0 else math.nan,
        "pull_p50": percentile(to_pull, 50),
        "pull_p99": percentile(to_pull, 99),
        "complete_p50": percentile(to_done, 50),
        "complete_p99": percentile(to_done, 99),
    }
