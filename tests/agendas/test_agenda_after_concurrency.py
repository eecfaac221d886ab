"""Agendas that wait for other agendas are released exactly once, under concurrent reporters
and concurrent submits (docs/design.md §6.5): real PostgreSQL, real threads."""

import itertools
import threading

import pytest
from django.db import connection

from agendas.models import AgendaDependency, AgendaProgress, AgendaWait
from agendas.services import agenda_submit
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling import report as report_service
from scheduling.models import ReadyAgenda
from tests.threads import all_at_once

UPSTREAMS = 10
REPORTERS = 8

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def leased(submitter, submit_agenda, insight, worker):
    """UPSTREAMS agendas leased to a worker: their executions."""
    insight.queue_size = UPSTREAMS
    insight.save()
    agendas = [submit_agenda(submitter, link_id="fan-in") for _ in range(UPSTREAMS)]
    fill_service.insight_fill(insight_id=insight.pk)
    pulled = pull_service.insight_pull(
        principal=worker.user, insight=insight, worker="w1", count=UPSTREAMS
    )
    assert len(pulled) == UPSTREAMS
    return agendas, [item.execution for item in pulled]


def _reporter(executions: list) -> callable:
    """A thread body: report `succeeded` for executions taken from the shared list."""
    lock = threading.Lock()

    def report() -> int:
        done = 0
        while True:
            with lock:
                if not executions:
                    return done
                execution = executions.pop()
            report_service.execution_report(
                execution_id=execution.pk, lease_token=execution.lease_token, state="succeeded"
            )
            done += 1

    return report


def test_fan_in_of_ten_releases_the_waiter_exactly_once_under_eight_reporters(
    leased, submitter, submit_agenda
):
    agendas, executions = leased
    waiter = submit_agenda(submitter, after={"agendas": [agenda.pk for agenda in agendas]})
    by_link = submit_agenda(submitter, after={"link_ids": ["fan-in"], "on": "completed"})
    assert AgendaProgress.objects.get(agenda=waiter).state == "pending"

    reported = all_at_once(REPORTERS, _reporter(list(executions)))

    assert sum(reported) == UPSTREAMS
    for agenda in (waiter, by_link):
        progress = AgendaProgress.objects.get(agenda=agenda)
        assert progress.state == "ready"
        assert progress.message == "ready: the agendas it waited for finished"
        assert ReadyAgenda.objects.filter(agenda=agenda).count() == 1
        wait = AgendaWait.objects.get(agenda=agenda)
        assert (wait.total, wait.remaining, wait.ended_at is not None) == (UPSTREAMS, 0, True)
        assert AgendaDependency.objects.filter(waiter=agenda, finished_at__isnull=True).count() == 0
    assert set(
        AgendaProgress.objects.filter(agenda__in=agendas).values_list("state", flat=True)
    ) == {"succeeded"}


def test_agendas_submitted_while_their_upstream_finishes_are_never_left_waiting(
    leased, submitter, customer
):
    agendas, executions = leased
    upstream, execution = agendas[0], None
    execution = next(e for e in executions if e.agenda_id == upstream.pk)
    turns = itertools.count()
    waiters = []
    lock = threading.Lock()

    def act() -> None:
        with lock:
            turn = next(turns)
        if turn == 0:
            report_service.execution_report(
                execution_id=execution.pk, lease_token=execution.lease_token, state="succeeded"
            )
            return
        agenda, _ = agenda_submit(
            principal=submitter.user,
            customer=customer,
            operations=[{"name": "probe", "type": "mediainfo"}],
            after={"agendas": [upstream.pk]},
        )
        with lock:
            waiters.append(agenda.pk)

    all_at_once(REPORTERS, act)

    assert len(waiters) == REPORTERS - 1
    assert AgendaProgress.objects.get(agenda=upstream).state == "succeeded"
    assert list(
        AgendaProgress.objects.filter(agenda__in=waiters).values_list("state", flat=True)
    ) == ["ready"] * len(waiters)
    assert ReadyAgenda.objects.filter(agenda__in=waiters).count() == len(waiters)
