"""Reap: one full `agendas_reap` over 100,000 expired terminal agendas (--quick: 20,000) —
agendas/s, statements per batch, and what a reap with nothing expired costs.

The expired agendas are succeeded, completed 40 days ago (the default 30-day TTL), each with
its progress, 3 operations and 1 execution (the progress's current one), spread over 1,000 of
10,000 customers. A tenth as many more, completed 40 days ago too, belong to 10 customers who
keep a year of history: the reap must leave them (and every row under them) alone. Built with
set-based SQL in the phase's own database; statements are counted with an execute wrapper on
Django's connection (every statement the reap sends, transaction control aside). The batch
size is POP_REAP_BATCH_SIZE's (set it in the environment to compare).
"""

from __future__ import annotations

import time

import psycopg

from bench.common import (
    PhaseResult,
    World,
    bench_database,
    close_django_connections,
    django_setup,
    dsn,
    make_world,
    phase_main,
    say,
    vacuum_analyze,
)

CUSTOMERS = 10_000
EXPIRING_CUSTOMERS = 1_000
KEEPING_CUSTOMERS = 10  # data_ttl_days = 365
TARGET = 10_000  # agendas per second
TABLES = (
    "agendas_agenda",
    "agendas_agendaprogress",
    "agendas_operationprogress",
    "agendas_execution",
)


def add_customers(pool_id: str, count: int) -> list[str]:
    from resourcepools.models import Customer

    created = Customer.objects.bulk_create(
        [
            Customer(
                name=f"Tenant {n}",
                slug=f"tenant-{n}",
                resource_pool_id=pool_id,
                data_ttl_days=365 if n < KEEPING_CUSTOMERS else 30,
            )
            for n in range(count)
        ],
        batch_size=5000,
    )
    return [str(customer.pk) for customer in created]


def world_with_customers(count: int) -> tuple[World, list[str]]:
    """A world whose pool has `count` customers of `add_customers` (and none of its own); the
    Django connection is closed afterwards, for the set-based builders that follow."""
    from resourcepools.models import Insight

    world = make_world(customers=0)
    pool_id = Insight.objects.get(pk=world.insight_id).resource_pool_id
    customer_ids = add_customers(pool_id, count)
    close_django_connections()
    return world, customer_ids


FORTY_DAYS_AGO = "now() - interval '40 days' - g * interval '1 millisecond'"


def build_terminal(
    dbname: str,
    *,
    insight_id: str,
    customer_ids: list[str],
    count: int,
    done_sql: str = FORTY_DAYS_AGO,
) -> None:
    """`count` succeeded agendas created and completed at `done_sql` (an SQL expression of the
    row number `g`; default 40 days ago), round robin over `customer_ids`, each with progress,
    3 succeeded operations and its one (current) execution."""
    with psycopg.connect(dsn(dbname)) as conn:
        for first in range(0, count, 50_000):
            size = min(50_000, count - first)
            conn.execute(
                "CREATE TEMP TABLE bench_new ON COMMIT DROP AS "
                "SELECT gen_random_uuid() AS id, gen_random_uuid() AS progress_id, "
                "gen_random_uuid() AS execution_id, (%s::uuid[])[1 + g %% %s] AS customer_id, "
                f"{done_sql} AS done "
                "FROM generate_series(%s::int, %s::int) g",
                [customer_ids, len(customer_ids), first, first + size - 1],
            )
            conn.execute(
                """
                INSERT INTO agendas_agenda (id, link_id, cid, created_at, updated_at, customer_id,
                    insight_id, operations, params, priority, max_attempts, retry_delay_seconds,
                    callback_url, external_id, idempotency_key, labels)
                SELECT id, '', 'bench', done, done, customer_id, %s,
                    '[{"name": "a", "type": "noop"}, {"name": "b", "type": "noop"},
                      {"name": "c", "type": "noop"}]'::jsonb,
                    '{}'::jsonb, 5, 3, 0, '', '', '', '{}'::jsonb
                FROM bench_new
                """,
                [insight_id],
            )
            conn.execute(
                """
                INSERT INTO agendas_execution (id, agenda_id, customer_id, link_id, cid, number,
                    insight_id, worker, pull_request, lease_token, lease_expires_at, started_at,
                    last_report_at, ended_at, outcome, diagnostics, created_at, updated_at)
                SELECT execution_id, id, customer_id, '', 'bench', 1, %s, 'w1', '',
                    gen_random_uuid(), done, done, done, done, 'succeeded', '[]'::jsonb, done,
                    done
                FROM bench_new
                """,
                [insight_id],
            )
            conn.execute(
                """
                INSERT INTO agendas_agendaprogress (id, link_id, cid, created_at, updated_at,
                    agenda_id, customer_id, state, message, percent_complete, attempts_completed,
                    attempts_started, do_not_run, abort_requested, pause_requested, pause_now,
                    diagnostics, started_at, completed_at, current_execution_id)
                SELECT progress_id, '', 'bench', done, done, id, customer_id, 'succeeded', '',
                    100, 1, 1, false, false, false, false, '[]'::jsonb, done, done, execution_id
                FROM bench_new
                """
            )
            conn.execute(
                """
                INSERT INTO agendas_operationprogress (id, agenda_progress_id, customer_id,
                    link_id, cid, position, name, type, state, message, percent_complete,
                    attempt_count, result, params, diagnostics, is_generated, started_at,
                    completed_at, created_at, updated_at)
                SELECT gen_random_uuid(), progress_id, customer_id, '', 'bench', o.position,
                    o.name, 'noop', 'succeeded', '', 100, 1, '1'::jsonb, '{}'::jsonb,
                    '[]'::jsonb, false, done, done, done, done
                FROM bench_new, (VALUES (0, 'a'), (1, 'b'), (2, 'c')) AS o(position, name)
                """
            )
            conn.commit()


def row_counts() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        counts = {}
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cursor.fetchone()[0]
        return counts


def counted_reap() -> tuple[int, float, int]:
    """One `agendas_reap`: (agendas reaped, seconds, statements sent)."""
    from django.db import connection

    from scheduling.timed import agendas_reap

    statements = 0

    def count(execute, sql, params, many, context):
        nonlocal statements
        statements += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        started = time.perf_counter()
        reaped = agendas_reap()
        seconds = time.perf_counter() - started
    return reaped, seconds, statements


def run(*, quick: bool) -> PhaseResult:
    expired = 20_000 if quick else 100_000
    kept = expired // 10
    result = PhaseResult(
        phase="reap",
        sizes={
            "expired terminal agendas (progress, 3 operations, 1 execution each)": expired,
            "customers (with expired agendas)": f"{CUSTOMERS:,} ({EXPIRING_CUSTOMERS:,})",
            "kept: as old, of customers with a 365-day TTL": kept,
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_reap") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off")
        from django.conf import settings

        from resourcepools.models import Customer

        world, customer_ids = world_with_customers(CUSTOMERS)
        building = time.perf_counter()
        build_terminal(
            dbname,
            insight_id=world.insight_id,
            customer_ids=customer_ids[KEEPING_CUSTOMERS : KEEPING_CUSTOMERS + EXPIRING_CUSTOMERS],
            count=expired,
        )
        build_terminal(
            dbname,
            insight_id=world.insight_id,
            customer_ids=customer_ids[:KEEPING_CUSTOMERS],
            count=kept,
        )
        vacuum_analyze(dbname)
        say(
            f"  built {expired + kept:,} terminal agendas in {time.perf_counter() - building:.1f} s"
        )
        before = row_counts()

        reaped, seconds, statements = counted_reap()
        batch = int(settings.POP_REAP_BATCH_SIZE)
        per_second = reaped / seconds
        per_thousand = statements * 1000 / max(reaped, 1)
        # The shortest TTL once, the batches, and an empty pick when the last batch was full.
        batches = max(1, -(-reaped // batch))
        per_batch = (statements - 1 - (reaped % batch == 0)) / batches
        say(
            f"  reaped {reaped:,} in {seconds:.2f} s: {per_second:,.0f} agendas/s, "
            f"{statements} statements in {batches} batches of ≤ {batch} ({per_batch:.1f} a "
            f"batch, {per_thousand:.1f} per 1,000 agendas)"
        )
        idle_reaped, idle_seconds, idle_statements = counted_reap()
        say(
            f"  reap with nothing expired ({CUSTOMERS:,} customers): {idle_seconds * 1000:.1f} ms, "
            f"{idle_statements} statement(s); it reads the {kept:,} rows of the 365-day "
            "customers older than 30 days"
        )
        after = row_counts()
        Customer.objects.update(data_ttl_days=365)
        uniform_reaped, uniform_seconds, uniform_statements = counted_reap()
        idle_reaped += uniform_reaped
        say(
            f"  … and with every customer's TTL 365 days: {uniform_seconds * 1000:.1f} ms, "
            f"{uniform_statements} statement(s)"
        )
        close_django_connections()

    expected = {
        table: before[table] - expired * (3 if "operation" in table else 1) for table in TABLES
    }
    if reaped != expired or idle_reaped or after != expected:
        result.rejected = (
            f"reaped {reaped} (+{idle_reaped}) of {expired}; rows left {after}, expected {expected}"
        )
    result.add(
        f"reap {expired:,} expired agendas",
        per_second,
        "agendas/s",
        note=f"{seconds:.2f} s",
        target=f"≥ {TARGET:,} agendas/s",
        ok=per_second >= TARGET,
    )
    result.add(
        "statements per batch",
        per_batch,
        "statements",
        note=f"batches of ≤ {batch}; {per_thousand:.1f} per 1,000 agendas",
    )
    result.add(
        f"reap with nothing expired, {CUSTOMERS:,} customers",
        idle_seconds * 1000,
        "ms",
        note=f"{idle_statements} statements; reads the {kept:,} rows kept by longer TTLs",
    )
    result.add(
        f"reap with nothing expired, {CUSTOMERS:,} customers, one TTL",
        uniform_seconds * 1000,
        "ms",
        note=f"{uniform_statements} statements",
    )
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
