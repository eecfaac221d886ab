"""Real PostgreSQL, real threads: pullers drain a backlog while it is filled and topped up.

Every agenda must be executed exactly once: none pulled twice, none lost, none left queued.
Most of the backlog is copied in SQL from agendas submitted through the services (a submit
costs ~6 ms of Python here, which would dominate the run); the last LIVE_SUBMITS are submitted
through agenda_submit while the pullers and fillers run.
"""

import threading
import time
from collections import Counter

import pytest
from django.db import connection
from django.db.models import Count

from agendas.models import AgendaProgress, Execution
from agendas.services import agenda_submit
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling import report
from scheduling.models import QueuedAgenda, ReadyAgenda
from tests.factories import CustomerFactory
from tests.scheduling.conftest import clone_ready_agendas

TOTAL = 2000
LIVE_SUBMITS = 200
PULLERS = 8
FILLERS = 2

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]


def _in_thread(errors: list, target, *args) -> threading.Thread:
    def run():
        try:
            target(*args)
        except BaseException as error:  # surfaced by the test, not swallowed
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_eight_pullers_drain_2000_agendas_exactly_once_while_fills_run(
    pool, insight, make_principal, worker, operations
):
    insight.queue_size = 40
    insight.save()
    customers = [CustomerFactory(slug=f"drain-{n}", resource_pool=pool) for n in range(4)]
    principals = [make_principal(customer) for customer in customers]
    pulled_by: dict[int, list] = {n: [] for n in range(PULLERS)}
    submitted = Counter()
    seeded = TOTAL - LIVE_SUBMITS
    for number, principal in enumerate(principals):
        source, _ = agenda_submit(
            principal=principal.user,
            customer=principal.customer,
            operations=operations,
            priority=number * 3,
        )
        clone_ready_agendas(source, seeded // len(principals) - 1)
    assert ReadyAgenda.objects.count() == seeded
    errors: list = []
    done = threading.Event()

    def submit() -> None:
        for n in range(LIVE_SUBMITS):
            principal = principals[n % len(principals)]
            agenda_submit(
                principal=principal.user,
                customer=principal.customer,
                operations=operations,
                priority=n % 10,
            )
            submitted["live"] += 1

    def fill() -> None:
        while not done.is_set():
            fill_service.insight_fill(insight_id=insight.pk)
            time.sleep(0.05)

    def pull(number: int) -> None:
        batch = number % 2 == 0
        while not done.is_set():
            items = pull_service.insight_pull(
                principal=worker.user,
                insight=insight,
                worker=f"w{number}",
                count=10,
                wait_seconds=0.5,
            )
            if not items:
                continue
            pulled_by[number].extend(item.agenda.pk for item in items)
            if batch:
                results = report.execution_report_batch(
                    reports=[
                        {
                            "execution": item.execution.pk,
                            "lease_token": item.execution.lease_token,
                            "state": "succeeded",
                        }
                        for item in items
                    ]
                )
                assert [result.status for result in results] == [200] * len(items)
            else:
                for item in items:
                    report.execution_report(
                        execution_id=item.execution.pk,
                        lease_token=item.execution.lease_token,
                        operations=[{"name": "probe", "state": "succeeded", "result": 1}],
                        state="succeeded",
                    )

    threads = [_in_thread(errors, submit)]
    threads += [_in_thread(errors, fill) for _ in range(FILLERS)]
    threads += [_in_thread(errors, pull, n) for n in range(PULLERS)]
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not errors:
        if sum(len(agendas) for agendas in pulled_by.values()) >= TOTAL:
            break
        time.sleep(0.2)
    done.set()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert submitted["live"] == LIVE_SUBMITS
    every_pull = [agenda for agendas in pulled_by.values() for agenda in agendas]
    assert len(every_pull) == TOTAL
    assert len(set(every_pull)) == TOTAL  # no agenda pulled twice
    assert sum(1 for agendas in pulled_by.values() if agendas) > 1
    per_agenda = Execution.objects.values("agenda_id").annotate(n=Count("pk"))
    assert {row["n"] for row in per_agenda} == {1}
    assert Execution.objects.count() == TOTAL
    assert set(Execution.objects.values_list("outcome", flat=True)) == {"succeeded"}
    assert dict(AgendaProgress.objects.values_list("state").annotate(n=Count("pk"))) == {
        "succeeded": TOTAL
    }
    assert QueuedAgenda.objects.count() == 0
    assert ReadyAgenda.objects.count() == 0
