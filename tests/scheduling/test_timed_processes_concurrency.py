"""Each timed process is safe to run twice at once (docs/design.md §8): real PostgreSQL, real
threads.

Four runs of the same process start together on the same due work, in small batches so they
interleave; together they handle every item exactly once and leave nothing half-done.
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agendas.models import Agenda, AgendaProgress, Execution
from scheduling import timed as timed_service
from scheduling.models import QueuedAgenda, ReadyAgenda
from tests.threads import all_at_once

AGENDAS = 40
RUNS = 4

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]


@pytest.fixture
def executing(submitter, submit_agenda, insight, fill, pull):
    """AGENDAS agendas leased to a worker, with a retry left."""
    insight.queue_size = AGENDAS
    insight.max_execution_seconds = 120
    insight.save()
    for _ in range(AGENDAS):
        submit_agenda(submitter, max_attempts=2, retry_delay_seconds=0)
    fill(insight)
    pulled = pull(insight, count=AGENDAS)
    assert len(pulled) == AGENDAS
    return pulled


def _ended_once() -> None:
    """Every agenda's only execution ended once; every agenda is back in line for a retry."""
    assert Execution.objects.count() == AGENDAS
    assert Execution.objects.filter(outcome__isnull=True).count() == 0
    states = set(AgendaProgress.objects.values_list("state", flat=True))
    assert states <= {"pending", "ready", "queued"}


def test_concurrent_reclaims_end_each_expired_lease_exactly_once(executing, insight):
    later = timezone.now() + timedelta(seconds=insight.lease_seconds + 1)

    results = all_at_once(RUNS, timed_service.executions_reclaim, now=later, limit=AGENDAS)

    assert sum(results) == AGENDAS
    _ended_once()


def test_concurrent_time_outs_end_each_long_run_exactly_once(executing):
    later = timezone.now() + timedelta(seconds=121)

    results = all_at_once(RUNS, timed_service.executions_time_out, now=later, limit=AGENDAS)

    assert sum(results) == AGENDAS
    _ended_once()
    assert set(Execution.objects.values_list("outcome", flat=True)) == {"timed_out"}


def test_concurrent_promotions_make_each_due_agenda_ready_exactly_once(submitter, submit_agenda):
    run_after = timezone.now() + timedelta(minutes=5)
    for _ in range(AGENDAS):
        submit_agenda(submitter, run_after=run_after)
    assert ReadyAgenda.objects.count() == 0

    results = all_at_once(
        RUNS, timed_service.agendas_promote, now=run_after + timedelta(seconds=1), batch_size=3
    )

    assert sum(results) == AGENDAS
    ready = ReadyAgenda.objects.count() + QueuedAgenda.objects.count()
    assert ready == AGENDAS
    assert set(AgendaProgress.objects.values_list("state", flat=True)) <= {"ready", "queued"}


def test_concurrent_reaps_delete_each_expired_agenda_exactly_once(
    executing, submitter, submit_agenda, report
):
    for pulled in executing:
        report(pulled, state="succeeded")
    survivor = submit_agenda(submitter)  # not terminal: never reaped
    ttl = submitter.customer.data_ttl_days

    results = all_at_once(
        RUNS,
        timed_service.agendas_reap,
        now=timezone.now() + timedelta(days=ttl, seconds=1),
        batch_size=3,
    )

    assert sum(results) == AGENDAS
    assert list(Agenda.objects.values_list("pk", flat=True)) == [survivor.pk]
    assert Execution.objects.count() == 0
