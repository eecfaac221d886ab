"""Fill tenants: one `insight_fill` with 10, 1,000, 20,000 and 100,000 customers with ready
work — ms and rows read, the largest against the smallest.

Each customer has 2 ready agendas (the first 10 customers 20, so that every fill can move a
full room), written as a submit writes them, and an active lane (round_robin, room 100, every
lane at the same service level, so any customer may be picked).
Each fill runs inside an outer transaction that is rolled back, so every repetition sees the
same state; rows read are PostgreSQL's own per-transaction counters for the ready and lane
tables.
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
    vacuum_analyze,
)
from bench.fill_cost import READY_TABLE, one_fill

ROOM = 100
PER_CUSTOMER = 2
TIERS = (10, 1_000, 20_000, 100_000)
LANE_TABLE = "scheduling_customerlane"


def add_customers(pool_id: str, start: int, stop: int) -> list[str]:
    from resourcepools.models import Customer

    created = Customer.objects.bulk_create(
        [
            Customer(name=f"Tenant {n}", slug=f"tenant-{n}", resource_pool_id=pool_id)
            for n in range(start, stop)
        ],
        batch_size=5000,
    )
    return [str(customer.pk) for customer in created]


def run(*, quick: bool) -> PhaseResult:
    repeats = 3 if quick else 7
    result = PhaseResult(
        phase="fill_tenants",
        sizes={
            "customers with ready work": list(TIERS),
            "ready agendas per customer (the first 10: 20)": PER_CUSTOMER,
            "room per fill": ROOM,
            "fills per size (median)": repeats,
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_fill_tenants") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off")
        from resourcepools.models import Insight

        world = make_world(customers=0, queue_size=ROOM)
        pool_id = Insight.objects.get(pk=world.insight_id).resource_pool_id
        have = 0
        first_ms = None
        for tier in TIERS:
            customer_ids = add_customers(pool_id, have, tier)
            built = bulk_insert_ready(
                dbname,
                insight_id=world.insight_id,
                customer_ids=customer_ids,
                per_customer=PER_CUSTOMER if have else ROOM // TIERS[0] * 2,
            )
            have = tier
            close_django_connections()
            vacuum_analyze(dbname)
            tables = (READY_TABLE, LANE_TABLE)
            one_fill(world.insight_id, tables)  # warm the caches
            runs = [one_fill(world.insight_id, tables) for _ in range(repeats)]
            close_django_connections()
            ms = statistics.median(r[0] for r in runs)
            read = statistics.median(r[1] for r in runs)
            moved = runs[0][3]
            first_ms = first_ms or ms
            say(
                f"  fill with {tier:>7,} customers with ready work (built in {built:5.1f} s): "
                f"{ms:7.2f} ms, {read:.0f} index entries/rows read, moved {moved}"
            )
            if moved != ROOM:
                result.notes.append(f"the fill with {tier} customers moved {moved}, not {ROOM}")
            last = tier == TIERS[-1]
            result.add(
                f"fill with {tier:,} customers",
                ms,
                "ms",
                note=f"{read:.0f} rows read",
                ratio=ms / first_ms,
                reference=f"fill with {TIERS[0]} customers",
                target="≤ 2 × fill with 10 customers" if last else "",
                ok=(ms / first_ms <= 2.0) if last else None,
            )
            result.add(f"rows read by the fill with {tier:,} customers", read, "rows")
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
