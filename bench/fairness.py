"""Fairness: one customer floods, ten submit a few each, 2 pullers — round_robin, fair_share,
fifo and weighted_fair.

round_robin, fair_share and fifo (each on its own copy of one prepared database; --quick runs
round_robin and fair_share): the flooding customer
has `flood` ready agendas (set-based SQL: the first few thousand as a submit writes them, the
rest ReadyAgenda rows only, behind them — more than a run can pull); a periodic
filler (every POP_FILL_INTERVAL = 2 s, plus the sync fill nudges after pulls) and 2 in-process
pullers (pull 10, one batch report) run with the insight's default queue_size of 10. After
`alone` seconds, ten small customers submit `small_each` agendas each, all in one transaction.
From database timestamps (pull times) and the commit time of the small submits:
- each small customer's time from the commit of its submit to its first and last pull, in ms
  and in fill periods (2 s), and its rank by first pull;
- the contention window: from the first pull of a small agenda to the last (before it the queue
  still holds flood agendas filled earlier). Jain's index over the pulls each of the 11
  customers got in that window (1.0 = equal shares). fair_share serves the least usage
  first, so its flooder may get nothing while the newcomers catch up (10 equal shares of 11
  read 0.909): its targets are Jain's index among the 10 small customers and the flooder's
  share of the window at most an equal one (1/11);
- the flooder's pull rate over the two fill periods after the small submits, against its rate
  over the same length before them (alone); also its share of pulls inside the window.
fifo is the control: the flood, older, must win (the small customers wait behind it). A third
run repeats round_robin with POP_FILL_NUDGE_MIN_INTERVAL=0 (no per-process nudge throttle).
Each run has the autovacuum stand-in beside it on a server without autovacuum (the pullers
run the hot path's prepared statements, whose plans follow the tables only through ANALYZE).

weighted_fair: three customers with weights 1:2:4, each with a backlog longer than the run,
queue_size 100, pullers pull 50; the share each got over the first `weighted_pulls` pulls
against weight/Σweights — the largest relative error.
"""

from __future__ import annotations

import math
import multiprocessing
import time

import psycopg

from bench import workers
from bench.autovacuum import autovacuum_stand_in
from bench.common import (
    NOOP_OPERATIONS,
    TEMPLATE_DB,
    PhaseResult,
    World,
    bulk_insert_ready,
    close_django_connections,
    create_database,
    django_setup,
    drop_database,
    dsn,
    jain,
    make_world,
    percentile,
    phase_main,
    say,
    sizes_for,
    user,
    vacuum_analyze,
)
from bench.engine import use_database

FILL_PERIOD = 2.0
PULLERS = 2
BASE_DB = "pop_bench_fair"


def submit_together(world: World, counts: dict[str, int]) -> float:
    """Submit agendas for several customers in one agendas_submit_many call (one transaction,
    as staff), so they all become ready at the same instant; return that instant (the commit,
    before any on-commit fill nudge runs)."""
    from django.db import transaction

    from agendas.services import agendas_submit_many
    from resourcepools.models import Customer

    committed: list[float] = []

    customers = {str(pk): row for pk, row in Customer.objects.in_bulk(list(counts)).items()}
    items = [
        {"operations": NOOP_OPERATIONS, "customer": customers[customer_id]}
        for customer_id, count in counts.items()
        for _ in range(count)
    ]
    with transaction.atomic():
        transaction.on_commit(lambda: committed.append(time.time()))  # runs first
        results = agendas_submit_many(principal=user(world.staff_user_id), items=items)
    bad = [result for result in results if isinstance(result, dict)]
    if bad:
        raise RuntimeError(f"submit refused items: {bad[:3]}")
    return committed[0]


def start_roles(world: World, count: int):
    context = multiprocessing.get_context("fork")
    stop, out = context.Event(), context.Queue()
    close_django_connections()
    processes = [
        context.Process(target=workers.filler, args=(world, FILL_PERIOD, stop)),
        *(
            context.Process(target=workers.puller, args=(world, count, stop, out))
            for _ in range(PULLERS)
        ),
    ]
    for process in processes:
        process.start()
    return stop, out, processes


def stop_roles(stop, out, processes) -> int:
    stop.set()
    failures = 0
    for _ in range(PULLERS):
        failures += out.get(timeout=60)[2]
    for process in processes:
        process.join(timeout=30)
    return failures


def pulls(dbname: str) -> list[tuple[str, float]]:
    """(customer id, pull time) of every first-attempt execution, in pull order."""
    with psycopg.connect(dsn(dbname)) as conn:
        return [
            (str(customer), float(at))
            for customer, at in conn.execute(
                "SELECT customer_id, extract(epoch FROM started_at) FROM agendas_execution "
                "ORDER BY started_at"
            )
        ]


def small_figures(dbname: str, small: list[str]) -> dict[str, dict]:
    """Per small customer: submit time, first and last pull time (None when not pulled)."""
    with psycopg.connect(dsn(dbname)) as conn:
        rows = conn.execute(
            """
            SELECT a.customer_id, min(extract(epoch FROM a.created_at)),
                   min(extract(epoch FROM e.started_at)), max(extract(epoch FROM e.started_at)),
                   count(e.id), count(a.id)
            FROM agendas_agenda a LEFT JOIN agendas_execution e ON e.agenda_id = a.id
            WHERE a.customer_id = ANY(%s::uuid[])
            GROUP BY a.customer_id
            """,
            [small],
        ).fetchall()
    return {
        str(customer): {
            "submitted": float(submitted),
            "first": float(first) if first is not None else None,
            "last": float(last) if pulled == total else None,
            "pulled": pulled,
            "total": total,
        }
        for customer, submitted, first, last, pulled, total in rows
    }


def contention(
    dbname: str, world: World, algorithm: str, alone: float, timeout: float, small_each: int
) -> dict:
    """Run the flood + small customers scenario on `dbname` (already holding the flood)."""
    from resourcepools.models import Insight

    use_database(dbname)
    Insight.objects.filter(pk=world.insight_id).update(scheduling_algorithm=algorithm)
    flooder, small = world.customers[0], world.customers[1:]
    stop, out, processes = start_roles(world, 10)
    try:
        time.sleep(alone)
        committed = submit_together(world, dict.fromkeys(small, small_each))
        close_django_connections()
        deadline = time.monotonic() + timeout
        # Run on for at least two fill periods after the submit (the flooder's rate is
        # measured over them), until every small agenda is pulled or the time is up. fifo,
        # the control, serves the flood first: its small agendas wait behind the whole flood,
        # so its run ends with those two fill periods instead of idling to the timeout.
        window_end = committed + 2 * FILL_PERIOD + 0.5
        while time.monotonic() < deadline:
            figures = small_figures(dbname, small)
            if time.time() >= window_end and (
                algorithm == "fifo" or all(f["last"] for f in figures.values())
            ):
                break
            time.sleep(0.2)
    finally:
        failures = stop_roles(stop, out, processes)
    figures = small_figures(dbname, small)
    timeline = pulls(dbname)
    t0 = committed
    lasts = [f["last"] for f in figures.values()]
    served_all = all(last is not None for last in lasts)
    # The contention window: from the first pull of a small agenda (the first fill that could
    # take one) to the last; before it, the queue still held flood agendas filled earlier.
    first_small = min((f["first"] for f in figures.values() if f["first"]), default=None)
    start = first_small if first_small is not None else t0
    t1 = max(lasts) if served_all else timeline[-1][1]
    window = [c for c, at in timeline if start <= at <= t1]
    counts = [sum(1 for c in window if c == customer) for customer in world.customers]
    span = 2 * FILL_PERIOD
    before = sum(1 for c, at in timeline if c == flooder and t0 - span <= at < t0)
    during = sum(1 for c, at in timeline if c == flooder and t0 <= at < t0 + span)
    total_before = sum(1 for _, at in timeline if t0 - span <= at < t0)
    total_during = sum(1 for _, at in timeline if t0 <= at < t0 + span)
    buckets = []
    for second in range(-4, 8):
        lo, hi = t0 + second, t0 + second + 1
        flood_n = sum(1 for c, at in timeline if c == flooder and lo <= at < hi)
        small_n = sum(1 for c, at in timeline if c != flooder and lo <= at < hi)
        buckets.append(f"{second:+d}s {flood_n}/{small_n}")
    firsts = sorted((f["first"] or math.inf, c) for c, f in figures.items())
    rank = {c: n + 1 for n, (_, c) in enumerate(firsts)}
    per_customer = {
        c: {
            "first_ms": (f["first"] - committed) * 1000 if f["first"] else None,
            "last_ms": (f["last"] - committed) * 1000 if f["last"] else None,
            "pulled": f["pulled"],
            "rank": rank[c],
        }
        for c, f in figures.items()
    }
    return {
        "served_all": served_all,
        "per_customer": per_customer,
        "window_s": t1 - start,
        "jain": jain(counts),
        "jain_small": jain(counts[1:]),  # the newcomers only: the flooder is customers[0]
        "flood_share": counts[0] / max(1, sum(counts)),
        "flood_alone_rate": before / span,
        "flood_contention_rate": during / span,
        "total_alone_rate": total_before / span,
        "total_contention_rate": total_during / span,
        "report_failures": failures,
        "timeline": ", ".join(buckets),
    }


def weighted(dbname: str, world: World, target_pulls: int, timeout: float) -> dict:
    use_database(dbname)
    stop, out, processes = start_roles(world, 50)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(dsn(dbname)) as conn:
                done = conn.execute("SELECT count(*) FROM agendas_execution").fetchone()[0]
            if done >= target_pulls:
                break
            time.sleep(0.5)
    finally:
        failures = stop_roles(stop, out, processes)
    timeline = pulls(dbname)[:target_pulls]
    weights = {c: w for c, w in zip(world.customers, (1, 2, 4), strict=True)}
    total_weight = sum(weights.values())
    shares = {
        c: sum(1 for customer, _ in timeline if customer == c) / max(1, len(timeline))
        for c in world.customers
    }
    errors = {c: abs(shares[c] / (weights[c] / total_weight) - 1) for c in world.customers}
    return {
        "pulls": len(timeline),
        "shares": [round(shares[c], 4) for c in world.customers],
        "expected": [round(weights[c] / total_weight, 4) for c in world.customers],
        "max_error": max(errors.values()),
        "report_failures": failures,
    }


def record(result: PhaseResult, algorithm: str, figures: dict) -> None:
    lasts = [p["last_ms"] for p in figures["per_customer"].values()]
    firsts = [p["first_ms"] for p in figures["per_customer"].values()]
    served = figures["served_all"]
    worst_last = max(lasts) if served else None
    ratio = (
        figures["flood_contention_rate"] / figures["flood_alone_rate"]
        if figures["flood_alone_rate"]
        else None
    )
    say(
        f"  fairness {algorithm:12} small customers: first pull p50 "
        f"{_ms(percentile([f for f in firsts if f is not None], 50))}, last pull max "
        f"{_ms(worst_last)} ({_periods(worst_last)} fill periods); Jain {figures['jain']:.3f} "
        f"over {figures['window_s']:.1f} s; flooder share in window "
        f"{figures['flood_share']:.0%}; flooder rate {figures['flood_contention_rate']:.0f}/s "
        f"during vs {figures['flood_alone_rate']:.0f}/s alone"
        + ("" if served else "  (NOT all small agendas pulled before the run stopped)")
    )
    ranked = sorted(figures["per_customer"].items(), key=lambda i: i[1]["rank"])
    result.notes.append(
        f"{algorithm}: small customers by rank — customer: first / last pull after the submit "
        "(fill periods), pulled: "
        + "; ".join(
            f"#{p['rank']} {customer[:8]}: {_ms(p['first_ms'])} / {_ms(p['last_ms'])} "
            f"({_periods(p['first_ms'])} / {_periods(p['last_ms'])}), {p['pulled']}"
            for customer, p in ranked
        )
    )
    result.notes.append(
        f"{algorithm}: pulls per second around the small submits (flooder/small): "
        f"{figures['timeline']}; all customers {figures['total_contention_rate']:.0f}/s during "
        f"vs {figures['total_alone_rate']:.0f}/s alone"
    )
    control = algorithm.startswith("fifo")
    result.add(
        f"{algorithm}: last small pull (worst customer)",
        worst_last,
        "ms",
        note=f"{_periods(worst_last)} fill periods" if served else "not all pulled",
        target="flood wins (control)" if control else "≤ 2 fill periods",
        ok=(not served or worst_last > 2 * FILL_PERIOD * 1000)
        if control
        else (served and worst_last <= 2 * FILL_PERIOD * 1000),
    )
    # Fair share serves the customers with the least usage first: the flooder, whose usage
    # is the largest, may get no pull while the newcomers catch up, and 10 equal shares of 11
    # read 0.909 over all customers. Its promise is equal shares among the equal newcomers and
    # no more than an equal share for the flooder while they wait.
    by_usage = algorithm == "fair_share"
    result.add(
        f"{algorithm}: Jain's index, contention window",
        figures["jain"],
        "",
        note=f"window {figures['window_s']:.1f} s, flooder share {figures['flood_share']:.0%}",
        target="low (control)" if control else "" if by_usage else "≥ 0.95",
        ok=None if control or by_usage else figures["jain"] >= 0.95,
    )
    if by_usage:
        customers = len(figures["per_customer"]) + 1
        result.add(
            f"{algorithm}: Jain's index among the small customers, contention window",
            figures["jain_small"],
            "",
            target="≥ 0.95",
            ok=figures["jain_small"] >= 0.95,
        )
        result.add(
            f"{algorithm}: flooder's share of the pulls, contention window",
            figures["flood_share"] * 100,
            "%",
            target=f"≤ 1/{customers} (an equal share)",
            ok=figures["flood_share"] <= 1 / customers + 1e-9,
        )
    result.add(
        f"{algorithm}: flooder rate, 2 fill periods after the small submits",
        figures["flood_contention_rate"],
        "pulls/s",
        ratio=ratio,
        reference="flooder alone",
        target="" if control else "≥ 0.8 × alone",
        ok=None if control or ratio is None else ratio >= 0.8,
    )


def _ms(value: float | None) -> str:
    return (
        "—"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else (f"{value:.0f} ms")
    )


def _periods(value: float | None) -> str:
    return "—" if value is None else f"{value / 1000 / FILL_PERIOD:.2f}"


def run(*, quick: bool) -> PhaseResult:
    sizes = sizes_for(quick)
    flood, small_n, small_each = sizes["flood"], sizes["small_customers"], sizes["small_each"]
    alone = 2 * FILL_PERIOD + 1
    timeout = sizes["contention_seconds"]
    target_pulls = sizes["weighted_pulls"]
    result = PhaseResult(
        phase="fairness",
        sizes={
            "flood": flood,
            "small customers × agendas": f"{small_n} × {small_each}",
            "pullers": PULLERS,
            "queue_size (flood runs)": 10,
            "fill period (s)": FILL_PERIOD,
            "weighted_fair pulls": target_pulls,
            "a run stops after (s)": timeout,
        },
    )
    started = time.perf_counter()
    create_database(BASE_DB, template=TEMPLATE_DB)
    try:
        django_setup(BASE_DB, POP_FILL_NUDGE="sync", POP_FILL_INTERVAL=str(FILL_PERIOD))
        world = make_world(customers=1 + small_n, queue_size=10)
        close_django_connections()
        # The flood: real agendas as far as a run can pull (3,000 + 1,000/s × the run: two
        # pullers took 1,500–1,800/s on 2026-11-27, and ran out of 200/s's in the window), then
        # ReadyAgenda-only rows behind them, up to `flood`.
        real = min(flood, 3000 + int(1000 * (alone + timeout)))
        built = bulk_insert_ready(
            BASE_DB,
            insight_id=world.insight_id,
            customer_ids=world.customers[:1],
            per_customer=real,
        )
        built += bulk_insert_ready(
            BASE_DB,
            insight_id=world.insight_id,
            customer_ids=world.customers[:1],
            per_customer=flood - real,
            added_at_sql="now() - interval '30 minutes' + (g * interval '1 microsecond')",
            ready_only=True,
        )
        say(f"  fairness: flood of {flood} ready agendas built in {built:.0f} s")
        from django.conf import settings

        default_throttle = settings.POP_FILL_NUDGE_MIN_INTERVAL
        # The third run repeats round_robin with the per-process fill-nudge throttle off, to
        # separate the algorithm from the fill stalls the throttle causes (bench/RESULTS.md).
        runs = [
            ("round_robin", "round_robin", default_throttle),
            ("fair_share", "fair_share", default_throttle),
            ("fifo", "fifo", default_throttle),
            ("round_robin, nudge throttle 0", "round_robin", 0.0),
        ]
        if quick:  # the short form: round robin and fair share
            runs = runs[:2]
        for label, algorithm, throttle in runs:
            dbname = f"{BASE_DB}_run"
            create_database(dbname, template=BASE_DB)
            settings.POP_FILL_NUDGE_MIN_INTERVAL = throttle  # the forked roles inherit it
            try:
                vacuum_analyze(dbname)
                # A run grows the executions from empty; a server with autovacuum keeps the
                # planner's picture of them (and of the prepared hot path) current.
                with autovacuum_stand_in(dbname):
                    figures = contention(dbname, world, algorithm, alone, timeout, small_each)
                record(result, label, figures)
            finally:
                settings.POP_FILL_NUDGE_MIN_INTERVAL = default_throttle
                close_django_connections()
                drop_database(dbname)
        dbname = f"{BASE_DB}_weighted"
        create_database(dbname, template=TEMPLATE_DB)
        try:
            use_database(dbname)
            world = make_world(
                customers=3, weights=[1, 2, 4], queue_size=100, algorithm="weighted_fair"
            )
            close_django_connections()
            bulk_insert_ready(
                dbname,
                insight_id=world.insight_id,
                customer_ids=world.customers,
                per_customer=math.ceil(target_pulls * 4 / 7) + 200,
            )
            vacuum_analyze(dbname)
            with autovacuum_stand_in(dbname):
                figures = weighted(dbname, world, target_pulls, sizes["weighted_seconds"])
            say(
                f"  fairness weighted_fair 1:2:4 over {figures['pulls']} pulls: shares "
                f"{figures['shares']} vs {figures['expected']}, max error "
                f"{figures['max_error']:.1%}"
            )
            result.add(
                "weighted_fair 1:2:4: largest share error",
                figures["max_error"] * 100,
                "%",
                note=f"over {figures['pulls']} pulls; shares {figures['shares']}",
                target="≤ 5% over ≥ 5k pulls",
                ok=figures["max_error"] <= 0.05 and figures["pulls"] >= 5000,
            )
        finally:
            close_django_connections()
            drop_database(dbname)
    finally:
        close_django_connections()
        drop_database(BASE_DB)
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
