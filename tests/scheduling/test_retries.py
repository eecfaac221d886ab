"""Retries at the point of failure and their backoff (docs/design.md §4), promote (docs/design.md
§8)."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from agendas.models import AgendaProgress, Execution
from agendas.services import agenda_rerun
from scheduling import timed
from scheduling.models import ReadyAgenda
from tests.scheduling.conftest import state_of

pytestmark = pytest.mark.django_db


def test_retry_resumes_at_the_point_of_failure(
    submitter, submit_agenda, insight, fill, pull, report, three_operations
):
    agenda = submit_agenda(submitter, operations=three_operations, retry_delay_seconds=0)
    fill(insight)
    [first] = pull(insight)
    report(
        first,
        operations=[
            {"name": "probe", "state": "succeeded", "result": {"size": 42}},
            {"name": "measure", "state": "executing", "params": {"job": "j-1"}},
        ],
    )
    answer = report(
        first,
        state="failed",
        operations=[
            {
                "name": "measure",
                "state": "failed",
                "diagnostics": [{"message": "remote job died", "code": "E1"}],
            }
        ],
    )
    assert answer.state == "ready"  # zero delay: straight back to ready

    fill(insight)
    [second] = pull(insight)

    assert second.agenda.pk == agenda.pk
    assert second.execution.number == 2
    prior = {op.name: op for op in second.operations}
    assert (prior["probe"].state, prior["probe"].result) == ("succeeded", {"size": 42})
    assert (prior["measure"].state, prior["measure"].params) == ("failed", {"job": "j-1"})
    assert prior["measure"].diagnostics[0]["message"] == "remote job died"
    assert prior["report"].state == "waiting"
    assert second.prior_progress["attempts_completed"] == 1
    report(
        second,
        state="succeeded",
        operations=[
            {"name": "measure", "state": "succeeded", "result": 1},
            {"name": "report", "state": "succeeded"},
        ],
    )
    assert state_of(agenda) == "succeeded"


def test_backoff_doubles_per_attempt_with_jitter_and_promote_waits_for_it(
    submitter, submit_agenda, insight, fill, pull, report
):
    agenda = submit_agenda(submitter, retry_delay_seconds=10, max_attempts=3)
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        fill(insight)
        [first] = pull(insight)
        report(first, state="failed", message="boom")
        progress = AgendaProgress.objects.get(agenda=agenda)
        assert progress.state == "pending"
        assert "attempt 1 of 3 failed: boom" in progress.message
        delay = (progress.run_after - start).total_seconds()
        assert 8 <= delay <= 12

        clock.shift(timedelta(seconds=delay - 0.5))
        assert timed.agendas_promote() == 0
        assert state_of(agenda) == "pending"
        clock.shift(timedelta(seconds=1))
        assert timed.agendas_promote() == 1
        assert state_of(agenda) == "ready"
        assert ReadyAgenda.objects.filter(agenda=agenda).exists()

        fill(insight)
        [second] = pull(insight)
        second_failed_at = timezone.now()
        report(second, state="failed")
        progress.refresh_from_db()
        assert 16 <= (progress.run_after - second_failed_at).total_seconds() <= 24

        clock.shift(timedelta(seconds=25))
        timed.agendas_promote()
        fill(insight)
        [third] = pull(insight)
        report(third, state="failed", message="still broken")

    progress.refresh_from_db()
    assert (progress.state, progress.attempts_completed) == ("failed", 3)
    assert progress.message == "failed after 3 of 3 attempts: still broken"
    outcomes = list(Execution.objects.filter(agenda=agenda).values_list("number", "outcome"))
    assert sorted(outcomes) == [(1, "failed"), (2, "failed"), (3, "failed")]


def test_backoff_is_capped(submitter, submit_agenda, insight, fill, pull, report, settings):
    settings.POP_RETRY_DELAY_CAP_SECONDS = 600
    agenda = submit_agenda(submitter, retry_delay_seconds=500, max_attempts=5)
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        for _ in range(2):
            timed.agendas_promote()
            fill(insight)
            [pulled] = pull(insight)
            failed_at = timezone.now()
            report(pulled, state="failed")
            clock.shift(timedelta(seconds=700))

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.run_after - failed_at).total_seconds() <= 600


def test_promote_never_moves_a_do_not_run_agenda(submitter, submit_agenda, insight):
    held = submit_agenda(submitter, do_not_run=True)
    later = submit_agenda(submitter, run_after=timezone.now() + timedelta(minutes=5))

    with time_machine.travel(timezone.now() + timedelta(minutes=6)):
        assert timed.agendas_promote() == 1

    assert (state_of(held), state_of(later)) == ("pending", "ready")


def test_rerun_after_exhausted_attempts_grants_fresh_attempts(
    submitter, submit_agenda, insight, fill, pull, report
):
    agenda = submit_agenda(submitter, max_attempts=1)
    fill(insight)
    [first] = pull(insight)
    report(first, state="failed")
    assert state_of(agenda) == "failed"

    agenda_rerun(principal=submitter.user, agenda=agenda, mode="continue")
    fill(insight)
    [second] = pull(insight)

    assert second.execution.number == 2
    assert second.prior_progress["attempts_completed"] == 0
