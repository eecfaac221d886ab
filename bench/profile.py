"""Where POP's hot paths spend their time: queries per call and pyinstrument profiles.

`python -m bench.profile [--out DIR]` runs, in one process on its own database:
submit (one by one, and agendas_submit_many of 100), pull 1 + report 1, pull 100 + batch report
100, and one fill of 100 — counting SQL statements per call (Django's query capture) and
CPU vs wall time, then profiles each with pyinstrument (text trees written to DIR, default a
temporary directory). The figures and the conclusions are in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import (
    NOOP_OPERATIONS,
    bench_database,
    bulk_insert_ready,
    close_django_connections,
    django_setup,
    make_world,
    say,
    user,
    vacuum_analyze,
)


def measure(label: str, calls: int, per_call: int, func, out: Path) -> None:
    """Run `func` `calls` times plain (ms and SQL statements per agenda, CPU of this process),
    then `calls` times more under pyinstrument (its call tree goes to `out`)."""
    from django.db import connection
    from pyinstrument import Profiler

    statements = 0

    def count(execute, sql, params, many, context):
        nonlocal statements
        statements += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            func()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    agendas = calls * per_call
    say(
        f"  {label:34} {wall / agendas * 1000:7.2f} ms/agenda wall, {cpu / agendas * 1000:6.2f} "
        f"ms CPU in this process, {statements / agendas:5.2f} statements/agenda "
        f"({statements / calls:.0f} per call)"
    )
    profiler = Profiler(interval=0.001)
    profiler.start()
    for _ in range(calls):
        func()
    profiler.stop()
    path = out / f"{label.replace(' ', '_').replace('/', '-').replace(':', '')}.txt"
    path.write_text(profiler.output_text(unicode=False, color=False, show_all=False))


def run(out: Path) -> None:
    with bench_database("pop_bench_profile") as dbname:
        django_setup(dbname, POP_FILL_NUDGE="off")
        from agendas.services import agenda_submit, agendas_submit_many
        from resourcepools.models import Customer, Insight
        from scheduling.fill import insight_fill
        from scheduling.pull import insight_pull
        from scheduling.report import execution_report, execution_report_batch

        world = make_world(customers=1, queue_size=8000)
        customer_id = world.customers[0]
        principal = user(world.submitters[customer_id])
        worker = user(world.worker_user_id)
        customer = Customer.objects.get(pk=customer_id)
        say(f"profiles and call trees in {out}")
        measure(
            "submit one by one",
            100,
            1,
            lambda: agenda_submit(
                principal=principal, customer=customer, operations=NOOP_OPERATIONS
            ),
            out,
        )
        measure(
            "submit bulk 100",
            5,
            100,
            lambda: agendas_submit_many(
                principal=principal,
                items=[{"operations": NOOP_OPERATIONS, "customer": customer}] * 100,
            ),
            out,
        )
        close_django_connections()
        bulk_insert_ready(
            dbname, insight_id=world.insight_id, customer_ids=[customer_id], per_customer=5000
        )
        vacuum_analyze(dbname)
        Insight.objects.filter(pk=world.insight_id).update(queue_size=100)
        measure("fill 100", 5, 100, lambda: _fill_and_reset(insight_fill, world), out)
        Insight.objects.filter(pk=world.insight_id).update(queue_size=8000)
        insight_fill(insight_id=world.insight_id)
        # Statistics of the queued state, as the engine phase has them: analysed before the
        # fill, the planner takes 'queued' for rare and scans every queued row per claim.
        vacuum_analyze(dbname)
        insight = Insight.objects.select_related("resource_pool").get(pk=world.insight_id)

        def pull_report_one() -> None:
            for item in insight_pull(principal=worker, insight=insight, worker="p", count=1):
                execution_report(
                    execution_id=item.execution.pk,
                    lease_token=str(item.execution.lease_token),
                    state="succeeded",
                )

        def pull_report_hundred() -> None:
            pulled = insight_pull(principal=worker, insight=insight, worker="p", count=100)
            execution_report_batch(
                reports=[
                    {
                        "execution": item.execution.pk,
                        "lease_token": str(item.execution.lease_token),
                        "operations": [{"name": "noop", "state": "succeeded"}],
                        "state": "succeeded",
                    }
                    for item in pulled
                ]
            )

        measure("pull 1 + report 1", 200, 1, pull_report_one, out)
        measure("pull 100 + batch report 100", 10, 100, pull_report_hundred, out)
        views(world, out)
        close_django_connections()


def views(world, out: Path) -> None:
    """The same paths through the API views (DRF, serializers, auth), without a server."""
    from rest_framework.test import APIClient

    submitter = APIClient()
    submitter.credentials(HTTP_AUTHORIZATION=f"Token {world.tokens[world.customers[0]]}")
    puller = APIClient()
    puller.credentials(HTTP_AUTHORIZATION=f"Token {world.worker_token}")
    body = {"agendas": [{"operations": NOOP_OPERATIONS}] * 100}

    def bulk() -> None:
        response = submitter.post("/api/v1/agendas/bulk/", body, format="json")
        assert response.status_code == 200, response.content[:300]

    def pull_and_report() -> None:
        response = puller.post(
            f"/api/v1/insights/{world.insight_id}/pull/",
            {"count": 10, "worker": "view", "wait_seconds": 0},
            format="json",
        )
        assert response.status_code == 200, response.content[:300]
        reports = [
            {
                "execution": item["execution"]["id"],
                "lease_token": item["execution"]["lease_token"],
                "operations": [{"name": "noop", "state": "succeeded"}],
                "state": "succeeded",
            }
            for item in response.json()["agendas"]
        ]
        answer = puller.post("/api/v1/executions/report/", {"reports": reports}, format="json")
        assert answer.status_code == 200, answer.content[:300]

    measure("view: bulk submit 100", 3, 100, bulk, out)
    measure("view: pull 10 + batch report 10", 20, 10, pull_and_report, out)


def _fill_and_reset(insight_fill, world) -> None:
    """One fill of 100, then empty the queue again without touching the ready set's shape."""
    from scheduling.models import QueuedAgenda

    insight_fill(insight_id=world.insight_id)
    QueuedAgenda.objects.filter(insight_id=world.insight_id).delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", help="directory for the call trees")
    args = parser.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="pop-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    run(out)


if __name__ == "__main__":
    main()
