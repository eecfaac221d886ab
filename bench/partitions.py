"""History partitioned by month (deploy/postgresql/partitioned-history.sql) against the live
tables: a month's reap, and one agenda's lookup, read off PostgreSQL's own counters.

Four months of terminal history (100,000 agendas; --quick: 20,000), each agenda with its
progress, 3 operations and 1 execution, created in the first minutes of its month and spread over
100 customers, are built in the live tables with set-based SQL; the SQL file builds
`pop_history` beside them and `pop_history.copy_from_live` copies the four months in. Then:

1. a month's reap: POP's own `agendas_reap` of the oldest month (every customer's TTL set so
   that exactly that month has expired) against `pop_history.month_drop` of the same month —
   seconds, statements and WAL bytes (`pg_current_wal_lsn`) of each, each right after a
   CHECKPOINT;
2. one agenda's progress row looked up by agenda id, 200 times: in the live table, in the
   partitioned one by id alone (every month's index is probed) and by id with the agenda's
   creation time (one month's) — buffers touched per lookup (`EXPLAIN (ANALYZE, BUFFERS)`) and
   partitions scanned.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg

from bench.common import (
    PhaseResult,
    bench_database,
    close_django_connections,
    django_setup,
    dsn,
    phase_main,
    say,
    vacuum_analyze,
)
from bench.reap import build_terminal, counted_reap, row_counts, world_with_customers

SCHEMA_SQL = Path(__file__).resolve().parent.parent / "deploy/postgresql/partitioned-history.sql"
CUSTOMERS = 100
MONTHS = 4
LOOKUPS = 200
# Agenda g is created in month g % 4 (0: four months before this one), g / 4 milliseconds into it.
MONTHLY = (
    "date_trunc('month', now()) - interval '4 months' + (g %% 4) * interval '1 month' "
    "+ (g / 4) * interval '1 millisecond'"
)


def wal_bytes_since(conn: psycopg.Connection, lsn: str) -> int:
    return int(
        conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn]).fetchone()[0]
    )


def lookup_cost(conn: psycopg.Connection, sql: str, rows: list[tuple]) -> tuple[float, float]:
    """(buffers touched, relations scanned) per lookup, over `rows` (each the query's params)."""
    buffers = scanned = 0
    for params in rows:
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()[0]
        top = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]
        buffers += top["Shared Hit Blocks"] + top["Shared Read Blocks"]
        scanned += _scans(top)
    return buffers / len(rows), scanned / len(rows)


def _scans(node: dict) -> int:
    own = 1 if "Relation Name" in node else 0
    return own + sum(_scans(child) for child in node.get("Plans", []))


def run(*, quick: bool) -> PhaseResult:
    total = 20_000 if quick else 100_000
    per_month = total // MONTHS
    result = PhaseResult(
        phase="partitions",
        sizes={
            "terminal agendas (progress, 3 operations, 1 execution each)": total,
            "months (agendas each)": f"{MONTHS} ({per_month:,})",
            "customers": CUSTOMERS,
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_partitions") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off")
        from resourcepools.models import Customer

        world, customer_ids = world_with_customers(CUSTOMERS)
        build_terminal(
            dbname,
            insight_id=world.insight_id,
            customer_ids=customer_ids,
            count=total,
            done_sql=MONTHLY,
        )
        with psycopg.connect(dsn(dbname), autocommit=True) as conn:
            conn.execute(SCHEMA_SQL.read_text())
            oldest, second, now = conn.execute(
                "SELECT date_trunc('month', now()) - interval '4 months', "
                "date_trunc('month', now()) - interval '3 months', now()"
            ).fetchone()
            copying = time.perf_counter()
            copied = conn.execute(
                "SELECT pop_history.copy_from_live(%s, date_trunc('month', now()))", [oldest]
            ).fetchone()[0]
            copy_seconds = time.perf_counter() - copying
        vacuum_analyze(dbname)
        say(f"  copied {copied:,} agendas' history into pop_history in {copy_seconds:.1f} s")

        # Every customer keeps as many days as reach back into the second month: the oldest
        # month, all of it, has expired (its agendas are minutes into it), the others have not.
        Customer.objects.update(data_ttl_days=(now - second).days + 1)
        before = row_counts()
        with psycopg.connect(dsn(dbname), autocommit=True) as conn:
            # Each starts right after a checkpoint: the first change to a page after one writes
            # the whole page to the WAL, so both pay that as a reap after the hourly one would.
            conn.execute("CHECKPOINT")
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            reaped, reap_seconds, statements = counted_reap()
            reap_wal = wal_bytes_since(conn, lsn)

            conn.execute("CHECKPOINT")
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            dropping = time.perf_counter()
            month_drop = conn.execute("SELECT pop_history.month_drop(%s::date)", [oldest])
            dropped = month_drop.fetchone()[0]
            drop_seconds = time.perf_counter() - dropping
            drop_wal = wal_bytes_since(conn, lsn)
            left = {
                table: conn.execute(f"SELECT count(*) FROM pop_history.{table}").fetchone()[0]
                for table in ("agenda", "agendaprogress", "operationprogress", "execution")
            }
            conn.execute("ANALYZE")
            sample = conn.execute(
                "SELECT id, created_at FROM pop_history.agenda ORDER BY random() LIMIT %s",
                [LOOKUPS],
            ).fetchall()
            live = lookup_cost(
                conn,
                "SELECT * FROM agendas_agendaprogress WHERE agenda_id = %s",
                [(agenda_id,) for agenda_id, _ in sample],
            )
            by_id = lookup_cost(
                conn,
                "SELECT * FROM pop_history.agendaprogress WHERE agenda_id = %s",
                [(agenda_id,) for agenda_id, _ in sample],
            )
            by_id_and_time = lookup_cost(
                conn,
                "SELECT * FROM pop_history.agendaprogress "
                "WHERE agenda_id = %s AND agenda_created_at = %s",
                sample,
            )
        after = row_counts()
        close_django_connections()

    live_rows = {table: before[table] - after[table] for table in before}
    expected_left = {
        "agenda": total - per_month,
        "agendaprogress": total - per_month,
        "operationprogress": 3 * (total - per_month),
        "execution": total - per_month,
    }
    if copied != total or reaped != per_month or dropped != per_month or left != expected_left:
        result.rejected = (
            f"copied {copied} of {total}; reaped {reaped} and dropped {dropped} of {per_month}; "
            f"left {left}, expected {expected_left}"
        )
    say(
        f"  a month ({per_month:,} agendas): agendas_reap {reap_seconds:.2f} s, {statements} "
        f"statements, {reap_wal / 1e6:.1f} MB WAL ({sum(live_rows.values()):,} rows); "
        f"month_drop {drop_seconds * 1000:.0f} ms, {drop_wal / 1e3:.0f} kB WAL"
    )
    say(
        f"  one agenda's progress by agenda id: live {live[0]:.1f} buffers; partitioned by id "
        f"{by_id[0]:.1f} buffers over {by_id[1]:.0f} partitions; by id and creation time "
        f"{by_id_and_time[0]:.1f} buffers over {by_id_and_time[1]:.0f}"
    )
    result.add(
        f"reap a month of {per_month:,} agendas: agendas_reap (live tables)",
        reap_seconds,
        "s",
        note=f"{statements} statements, {reap_wal / 1e6:.1f} MB WAL",
    )
    result.add(
        "… month_drop (partitioned)",
        drop_seconds,
        "s",
        note=(
            f"{drop_wal / 1e3:.0f} kB WAL; {reap_seconds / max(drop_seconds, 1e-9):.0f} × faster, "
            f"{reap_wal / max(drop_wal, 1):.0f} × less WAL"
        ),
    )
    result.add("WAL of the month's reap: agendas_reap (live tables)", reap_wal / 1e6, "MB")
    result.add(
        "… month_drop (partitioned)",
        drop_wal / 1e6,
        "MB",
        note=f"{reap_wal / max(drop_wal, 1):.0f} × less WAL",
    )
    result.add(
        "one agenda's progress by agenda id: live table",
        live[0],
        "buffers",
    )
    result.add(
        "… partitioned, by id alone",
        by_id[0],
        "buffers",
        note=f"{by_id[1]:.0f} partitions scanned; {by_id[0] / live[0]:.2f} × live",
    )
    result.add(
        "… partitioned, by id and creation time",
        by_id_and_time[0],
        "buffers",
        note=f"{by_id_and_time[1]:.0f} partition scanned; {by_id_and_time[0] / live[0]:.2f} × live",
    )
    result.add(
        "copy the live history into pop_history",
        copied / copy_seconds,
        "agendas/s",
        note=f"{copied:,} agendas with their rows in {copy_seconds:.1f} s",
    )
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
