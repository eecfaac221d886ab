"""Rate limit: a customer limited to 30 agendas per minute floods an insight with 10,000
ready agendas beside an unlimited customer; fills every 2 s of a simulated clock (no real
sleeps: `insight_fill(now=…)`) for 10 minutes. Prints the limited customer's starts per minute
(target 30 ± 1 after the first minute, whose full bucket allows a burst of 30 more) and what
the unlimited customer started meanwhile, as a ratio to the room it had.
"""

from __future__ import annotations

import time
from datetime import timedelta

from bench.common import (
    PhaseResult,
    bench_database,
    bulk_insert_ready,
    close_django_connections,
    django_setup,
    make_world,
    phase_main,
    say,
)

LIMIT = 30
FILL_EVERY_SECONDS = 2
MINUTES = 10
ROOM = 50


def run(*, quick: bool) -> PhaseResult:
    flood = 2_000 if quick else 10_000
    minutes = 4 if quick else MINUTES
    result = PhaseResult(
        phase="rate",
        sizes={
            "flood of the limited customer": flood,
            "limit": f"{LIMIT} per minute",
            "simulated minutes": minutes,
            "fill period (simulated)": f"{FILL_EVERY_SECONDS} s",
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_rate") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off")
        from django.db.models import Count
        from django.utils import timezone

        from resourcepools.models import Customer
        from scheduling.fill import insight_fill
        from scheduling.models import QueuedAgenda

        world = make_world(customers=2, queue_size=ROOM)
        limited, other = world.customers
        Customer.objects.filter(pk=limited).update(rate_limit=LIMIT, rate_period_seconds=60)
        bulk_insert_ready(
            dbname, insight_id=world.insight_id, customer_ids=[limited], per_customer=flood
        )
        # The unlimited customer has more than every fill could take: it never runs dry.
        fills_per_minute = 60 // FILL_EVERY_SECONDS
        bulk_insert_ready(
            dbname,
            insight_id=world.insight_id,
            customer_ids=[other],
            per_customer=minutes * fills_per_minute * ROOM + 1,
        )
        close_django_connections()
        clock = timezone.now()
        per_minute: list[int] = []
        other_moved = 0
        for _ in range(minutes):
            minute = 0
            for _ in range(fills_per_minute):
                insight_fill(insight_id=world.insight_id, now=clock)
                queued = {
                    str(customer_id): count
                    for customer_id, count in QueuedAgenda.objects.values_list("customer_id")
                    .annotate(n=Count("pk"))
                    .values_list("customer_id", "n")
                    .order_by()
                }
                minute += queued.get(limited, 0)
                other_moved += queued.get(other, 0)
                # Everything queued is pulled at once: the queue never bounds the rate.
                QueuedAgenda.objects.all().delete()
                clock += timedelta(seconds=FILL_EVERY_SECONDS)
            per_minute.append(minute)
            say(f"  minute {len(per_minute)}: the limited customer started {minute}")
        close_django_connections()
    steady = per_minute[1:]
    worst = max(abs(count - LIMIT) for count in steady)
    result.add("starts in the first minute (full bucket)", per_minute[0], "agendas")
    result.add(
        "starts per minute after the first, worst distance from 30",
        worst,
        "agendas",
        note=f"per minute: {', '.join(str(count) for count in steady)}",
        target="≤ 1",
        ok=worst <= 1,
    )
    fills = minutes * fills_per_minute
    result.add(
        "unlimited customer's share of the room (the rest went to the limited one)",
        other_moved / (fills * ROOM),
        "ratio",
        note=f"{other_moved} started in {fills} fills of room {ROOM}",
    )
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
