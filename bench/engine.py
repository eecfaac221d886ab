"""Engine, in-process: the limit's three shapes through POP's services, same table size.

2 processes call `insight_pull` and report each agenda succeeded through `execution_report`
(claim-1, claim-10) or `execution_report_batch` (claim-100), straight into the services, no
HTTP. The queue holds `queue_rows` agendas at the start of each shape (a copy of one
prepared database per shape; the ready set is written with set-based SQL, then queued by one
`insight_fill`). Also measured, on a sample: the submit rate of `agenda_submit` one by one
and of `agendas_submit_many` in batches of 100.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

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
    make_world,
    say,
    sizes_for,
    submit_bulk,
    user,
    vacuum_analyze,
)

SHAPES = {"claim-1": (1, False), "claim-10": (10, False), "claim-100": (100, True)}
PROCESSES = 2
BASE_DB = "pop_bench_engine"


def use_database(dbname: str) -> None:
    """Point this process's Django connection at another bench database."""
    from django.conf import settings
    from django.db import connections

    close_django_connections()
    settings.DATABASES["default"]["NAME"] = dbname
    connections["default"].settings_dict["NAME"] = dbname


def worker(world: World, batch: int, batched: bool, seconds: float, start, out) -> None:
    from resourcepools.models import Insight
    from scheduling.pull import insight_pull
    from scheduling.report import execution_report, execution_report_batch

    name = multiprocessing.current_process().name
    principal = user(world.worker_user_id)
    insight = Insight.objects.select_related("resource_pool").get(pk=world.insight_id)
    done = 0
    start.wait()
    began = time.perf_counter()
    deadline = began + seconds
    while time.perf_counter() < deadline:
        pulled = insight_pull(principal=principal, insight=insight, worker=name, count=batch)
        if not pulled:
            break
        if batched:
            results = execution_report_batch(
                reports=[
                    {
                        "execution": item.execution.pk,
                        "lease_token": str(item.execution.lease_token),
                        "state": "succeeded",
                    }
                    for item in pulled
                ]
            )
            bad = [result for result in results if result.status != 200]
            if bad:
                raise RuntimeError(f"batch report refused: {bad[:3]}")
        else:
            for item in pulled:
                execution_report(
                    execution_id=item.execution.pk,
                    lease_token=str(item.execution.lease_token),
                    state="succeeded",
                )
        done += len(pulled)
    out.put((done, began, time.perf_counter()))


def check_once_per_attempt() -> str:
    """'' when no agenda was pulled twice in one attempt, else what went wrong."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT agenda_id, number FROM agendas_execution "
            "GROUP BY agenda_id, number HAVING count(*) > 1) twice"
        )
        twice = cursor.fetchone()[0]
    return f"{twice} agenda(s) pulled twice in one attempt" if twice else ""


def run_shape(world: World, dbname: str, shape: str, rows: int, seconds: float) -> dict:
    from agendas.models import Execution
    from scheduling.models import QueuedAgenda

    batch, batched = SHAPES[shape]
    create_database(dbname, template=BASE_DB)
    try:
        vacuum_analyze(dbname)
        use_database(dbname)
        context = multiprocessing.get_context("fork")
        start, out = context.Barrier(PROCESSES), context.Queue()
        processes = [
            context.Process(
                target=worker, args=(world, batch, batched, seconds, start, out), name=f"w{n}"
            )
            for n in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        results = [out.get(timeout=600) for _ in processes]
        for process in processes:
            process.join()
        done = sum(r[0] for r in results)
        elapsed = max(r[2] for r in results) - min(r[1] for r in results)
        succeeded = Execution.objects.filter(outcome="succeeded").count()
        left = QueuedAgenda.objects.count()
        problem = check_once_per_attempt()
        if succeeded != done or left != rows - done:
            problem = problem or f"succeeded {succeeded}, left {left}, reported {done} of {rows}"
        close_django_connections()
    finally:
        drop_database(dbname)
    return {"done": done, "seconds": elapsed, "rate": done / elapsed, "problem": problem}


def prepare(dbname: str, rows: int, sample: int) -> tuple[World, float, float]:
    """The base database: `rows` queued agendas; returns the world and both submit rates.

    `sample` agendas are submitted one by one and `sample` in bulk (the submit rates); the
    rest of the ready set is written with set-based SQL, then one fill queues all of them."""
    from agendas.services import agenda_submit
    from resourcepools.models import Customer
    from scheduling.fill import insight_fill

    world = make_world(customers=1, queue_size=rows)
    customer_id = world.customers[0]
    principal = user(world.submitters[customer_id])
    customer = Customer.objects.get(pk=customer_id)
    started = time.perf_counter()
    for _ in range(sample):
        agenda_submit(principal=principal, customer=customer, operations=NOOP_OPERATIONS)
    single_rate = sample / (time.perf_counter() - started)
    bulk_rate = sample / submit_bulk(world, customer_id, sample)
    close_django_connections()
    bulk_insert_ready(
        dbname,
        insight_id=world.insight_id,
        customer_ids=[customer_id],
        per_customer=rows - 2 * sample,
    )
    vacuum_analyze(dbname)
    moved = insight_fill(insight_id=world.insight_id).moved
    if moved != rows:
        raise RuntimeError(f"fill moved {moved} of {rows}")
    close_django_connections()
    return world, single_rate, bulk_rate


def run(*, quick: bool, limit: PhaseResult | None = None) -> PhaseResult:
    sizes = sizes_for(quick)
    rows, seconds = sizes["queue_rows"], sizes["shape_seconds"]
    result = PhaseResult(
        phase="engine",
        sizes={
            "queue rows": rows,
            "processes": PROCESSES,
            "seconds per shape (max)": seconds,
            "submit sample (one by one, and bulk)": sizes["submit_sample"],
        },
    )
    started = time.perf_counter()
    create_database(BASE_DB, template=TEMPLATE_DB)
    try:
        django_setup(BASE_DB, POP_FILL_NUDGE="off")
        world, single_rate, bulk_rate = prepare(BASE_DB, rows, sizes["submit_sample"])
        say(f"  engine submit: one by one {single_rate:6.0f}/s, bulk (100) {bulk_rate:6.0f}/s")
        result.add("submit one by one (agenda_submit)", single_rate, "agendas/s")
        result.add(
            "submit bulk 100 (agendas_submit_many)",
            bulk_rate,
            "agendas/s",
            ratio=bulk_rate / single_rate,
            reference="one by one",
        )
        for shape in SHAPES:
            figures = run_shape(world, f"{BASE_DB}_{shape.replace('-', '')}", shape, rows, seconds)
            if figures["problem"]:
                result.rejected = f"{shape}: {figures['problem']}"
            say(
                f"  engine {shape:10} {figures['done']:>7} of {rows} agendas in "
                f"{figures['seconds']:6.2f} s = {figures['rate']:8.0f} agendas/s"
                + (f"  REJECTED: {figures['problem']}" if figures["problem"] else "")
            )
            raw = limit_rate(limit, shape)
            ratio = figures["rate"] / raw if raw else None
            target = "≥ 0.5 × raw" if shape != "claim-100" else ""
            result.add(
                f"POP pull + report {shape}",
                figures["rate"],
                "agendas/s",
                ratio=ratio,
                reference=f"raw {shape}",
                target=target,
                ok=(ratio >= 0.5) if (target and ratio is not None) else None,
            )
    finally:
        close_django_connections()
        drop_database(BASE_DB)
    result.seconds = time.perf_counter() - started
    return result


def limit_rate(limit: PhaseResult | None, shape: str) -> float | None:
    if limit is None:
        return None
    for figure in limit.figures:
        if figure.metric == f"raw psycopg {shape}":
            return figure.value
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--limit", help="the limit phase's JSON, for the ratios")
    parser.add_argument("--out")
    args = parser.parse_args()
    limit = None
    if args.limit:
        with open(args.limit) as handle:
            limit = PhaseResult.from_dict(json.load(handle))
    result = run(quick=args.quick, limit=limit)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result.to_dict(), handle)


if __name__ == "__main__":
    main()
