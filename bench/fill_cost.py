"""Fill cost: one `insight_fill` at 1k, 100k and 1M ready agendas — ms and rows read.

The ready set (10 customers, round_robin, room 100 per fill) is built with set-based SQL
inserts: the first 1k as a submit writes them (Agenda, progress, operation, ReadyAgenda), the
rest as ReadyAgenda rows only (foreign-key checks off), later in every customer's order so no
fill picks them — the ready table and its indexes are as big as the size says. Each measured
fill runs inside an outer transaction that is rolled back afterwards, so every repetition
sees the same ready set; its time therefore leaves out the commit. Rows read come from
PostgreSQL's own per-transaction counters for `scheduling_readyagenda`: index entries returned
by its indexes plus rows returned by sequential scans of the table (and, apart, heap rows
fetched through an index).
"""

from __future__ import annotations

import statistics
import time

from bench.common import (
    PhaseResult,
    bench_database,
    bulk_insert_ready,
    close_django_connections,
    django_setup,
    make_world,
    phase_main,
    say,
    sizes_for,
    vacuum_analyze,
)

ROOM = 100
READY_TABLE = "scheduling_readyagenda"


class Rollback(Exception):
    pass


def counters(cursor, tables: tuple[str, ...] = (READY_TABLE,)) -> tuple[int, int]:
    """PostgreSQL's per-transaction counters, summed over `tables`: index entries returned by
    their indexes plus rows returned by sequential scans, and heap rows fetched."""
    read_total = fetched_total = 0
    for table in tables:
        cursor.execute(
            """
            SELECT
              coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
                        FROM pg_index i WHERE i.indrelid = %s::regclass), 0)
              + pg_stat_get_xact_tuples_returned(%s::regclass),
              pg_stat_get_xact_tuples_fetched(%s::regclass)
            """,
            [table, table, table],
        )
        read, fetched = cursor.fetchone()
        read_total, fetched_total = read_total + int(read), fetched_total + int(fetched)
    return read_total, fetched_total


def one_fill(
    insight_id: str, tables: tuple[str, ...] = (READY_TABLE,)
) -> tuple[float, int, int, int]:
    """(ms, rows read, heap rows fetched, agendas moved) of one fill, rolled back."""
    from django.db import connection, transaction

    from scheduling.fill import insight_fill

    figures: list = []
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                read0, fetched0 = counters(cursor, tables)
                started = time.perf_counter()
                moved = insight_fill(insight_id=insight_id).moved
                elapsed = (time.perf_counter() - started) * 1000
                read1, fetched1 = counters(cursor, tables)
            figures = [elapsed, read1 - read0, fetched1 - fetched0, moved]
            raise Rollback
    except Rollback:
        pass
    return tuple(figures)


def run(*, quick: bool) -> PhaseResult:
    sizes = sizes_for(quick)
    customers, repeats = sizes["fill_customers"], sizes["fill_repeats"]
    result = PhaseResult(
        phase="fill",
        sizes={
            "ready agendas": sizes["fill_sizes"],
            "customers": customers,
            "room per fill": ROOM,
            "fills per size (median)": repeats,
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_fill") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off")
        from resourcepools.models import Insight

        world = make_world(customers=customers, queue_size=ROOM)
        close_django_connections()
        have = 0
        first_ms = None
        for size in sizes["fill_sizes"]:
            per_customer = (size - have) // customers
            built = bulk_insert_ready(
                dbname,
                insight_id=world.insight_id,
                customer_ids=world.customers,
                per_customer=per_customer,
                added_at_sql=f"now() - interval '1 day' + (({have} + g) * interval '1 ms')",
                # Past the first size, only ReadyAgenda rows: later in every customer's order,
                # so no fill picks them, but every fill's index reads see them.
                ready_only=have > 0,
            )
            have += per_customer * customers
            vacuum_analyze(dbname)
            Insight.objects.filter(pk=world.insight_id).update(queue_size=ROOM)
            one_fill(world.insight_id)  # warm the caches
            runs = [one_fill(world.insight_id) for _ in range(repeats)]
            close_django_connections()
            ms = statistics.median(r[0] for r in runs)
            read = statistics.median(r[1] for r in runs)
            fetched = statistics.median(r[2] for r in runs)
            moved = runs[0][3]
            first_ms = first_ms or ms
            say(
                f"  fill at {have:>9,} ready (built in {built:5.1f} s): {ms:7.2f} ms, "
                f"{read:.0f} index entries/rows read, {fetched:.0f} heap rows fetched, "
                f"moved {moved}"
            )
            if moved != ROOM:
                result.notes.append(f"the fill at {have} ready moved {moved}, not {ROOM}")
            last = size == sizes["fill_sizes"][-1]
            result.add(
                f"fill at {have:,} ready",
                ms,
                "ms",
                note=f"{read:.0f} rows read",
                ratio=ms / first_ms,
                reference=f"fill at {sizes['fill_sizes'][0]:,}",
                target="≤ 2 × fill at 1k" if last else "",
                ok=(ms / first_ms <= 2.0) if last else None,
            )
            result.add(f"rows read by the fill at {have:,} ready", read, "rows")
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
