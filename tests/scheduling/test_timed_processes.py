"""Reclaim, time-out and reap (docs/design.md §8), and abort/pause of executing agendas
(docs/design.md §4; docs/design.md §7)."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.services import agenda_abort, agenda_pause, agenda_resume
from agendas.states import InvalidTransition
from scheduling import timed
from scheduling.models import CallbackDelivery
from tests.scheduling.conftest import state_of

pytestmark = pytest.mark.django_db


def _operation_states(agenda) -> dict[str, str]:
    return dict(
        OperationProgress.objects.filter(agenda_progress__agenda=agenda).values_list(
            "name", "state"
        )
    )


# --- reclaim ---------------------------------------------------------------------------------


def test_expired_lease_is_reclaimed_into_a_retry_and_the_late_report_is_refused(
    submitter, submit_agenda, insight, fill, pull, report
):
    agenda = submit_agenda(submitter, retry_delay_seconds=0)
    start = timezone.now()
    with time_machine.travel(start, tick=False) as clock:
        fill(insight)
        [pulled] = pull(insight, name="pod-7")
        report(
            pulled,
            operations=[
                {"name": "probe", "state": "succeeded", "result": {"size": 1}},
                {"name": "report", "state": "executing"},
            ],
        )
        reported_at = timezone.now()
        clock.shift(timedelta(seconds=insight.lease_seconds - 1))
        assert timed.executions_reclaim() == 0

        clock.shift(timedelta(seconds=2))
        assert timed.executions_reclaim() == 1
        assert timed.executions_reclaim() == 0  # running it again changes nothing

    execution = Execution.objects.get(pk=pulled.execution.pk)
    reason = f"lease expired: no report from worker pod-7 since {reported_at.isoformat()}"
    assert execution.outcome == "reclaimed"
    assert execution.diagnostics[0]["message"] == reason
    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.state, progress.attempts_completed) == ("ready", 1)
    assert reason in progress.message
    assert progress.diagnostics[-1]["code"] == "lease_expired"
    assert _operation_states(agenda) == {"probe": "succeeded", "report": "failed"}
    with pytest.raises(InvalidTransition):
        report(pulled, state="succeeded")


def test_a_lease_that_ran_out_without_a_single_report_returns_the_agenda_unspent(
    submitter, submit_agenda, insight, fill, pull, report
):
    """The pull's answer was lost: no attempt is used and the agenda is queued again at once;
    after max_attempts such losses the next one counts, so no agenda loops forever."""
    agenda = submit_agenda(submitter, max_attempts=2, retry_delay_seconds=60)
    outcomes = []
    with time_machine.travel(timezone.now(), tick=False) as clock:
        for _ in range(3):
            fill(insight)
            [pulled] = pull(insight)
            clock.shift(timedelta(seconds=insight.lease_seconds + 1))
            timed.executions_reclaim()
            outcomes.append(Execution.objects.get(pk=pulled.execution.pk).outcome)
            progress = AgendaProgress.objects.get(agenda=agenda)
            if progress.state == "pending":
                break
            assert (progress.state, progress.attempts_completed) == ("ready", 0)
            assert "no attempt used" in progress.message

    assert outcomes == ["unanswered", "unanswered", "reclaimed"]
    assert progress.attempts_completed == 1


def test_heartbeats_keep_the_lease(submitter, submit_agenda, insight, fill, pull, report):
    submit_agenda(submitter)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        fill(insight)
        [pulled] = pull(insight)
        for _ in range(3):
            clock.shift(timedelta(seconds=insight.lease_seconds * 0.6))
            report(pulled)
            assert timed.executions_reclaim() == 0

    assert Execution.objects.get(pk=pulled.execution.pk).outcome is None


def test_reclaim_of_the_last_attempt_fails_the_agenda(
    submitter, submit_agenda, insight, fill, pull, report
):
    agenda = submit_agenda(submitter, max_attempts=1)
    fill(insight)
    [pulled] = pull(insight)
    report(pulled)  # the worker got the agenda; then it went silent

    with time_machine.travel(timezone.now() + timedelta(seconds=insight.lease_seconds + 1)):
        timed.executions_reclaim()

    assert state_of(agenda) == "failed"


def test_reclaim_finishes_an_abort_the_worker_never_reported(
    submitter, submit_agenda, insight, fill, pull
):
    agenda = submit_agenda(submitter)
    fill(insight)
    pull(insight)
    agenda_abort(principal=submitter.user, agenda=agenda)

    with time_machine.travel(timezone.now() + timedelta(seconds=insight.lease_seconds + 1)):
        assert timed.executions_reclaim() == 1

    assert state_of(agenda) == "aborted"
    assert set(_operation_states(agenda).values()) == {"aborted"}
    assert AgendaProgress.objects.get(agenda=agenda).attempts_completed == 1


# --- time-out --------------------------------------------------------------------------------


def test_time_out_ends_a_heartbeating_execution_past_max_execution_seconds(
    submitter, submit_agenda, insight, fill, pull, report
):
    insight.max_execution_seconds = 120
    insight.save()
    agenda = submit_agenda(submitter, max_attempts=2, retry_delay_seconds=30)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        fill(insight)
        [pulled] = pull(insight)
        clock.shift(timedelta(seconds=50))
        report(pulled)
        clock.shift(timedelta(seconds=50))
        report(pulled)
        assert timed.executions_time_out() == 0
        clock.shift(timedelta(seconds=30))
        report(pulled)  # still heartbeating: the lease is fine, the run is too long

        assert timed.executions_time_out() == 1
        assert timed.executions_reclaim() == 0

    execution = Execution.objects.get(pk=pulled.execution.pk)
    assert execution.outcome == "timed_out"
    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.state, progress.attempts_completed) == ("pending", 1)
    assert "max_execution_seconds=120" in progress.message
    assert progress.run_after is not None


# --- abort and pause while executing --------------------------------------------------------


def test_abort_while_executing_flags_then_the_worker_stops(submitter, run_one, insight, report):
    pulled = run_one(submitter, insight)
    agenda_abort(principal=submitter.user, agenda=pulled.agenda)
    assert state_of(pulled.agenda) == "executing"

    answer = report(pulled, operations=[{"name": "probe", "state": "executing"}])
    assert answer.abort is True
    report(pulled, state="aborted")

    assert state_of(pulled.agenda) == "aborted"
    assert set(_operation_states(pulled.agenda).values()) == {"aborted"}


def test_pause_while_executing_then_resume_keeps_finished_operations(
    submitter, run_one, insight, fill, pull, report
):
    pulled = run_one(submitter, insight, callback_url="https://h.example/cb")
    agenda_pause(principal=submitter.user, agenda=pulled.agenda)

    answer = report(pulled, operations=[{"name": "probe", "state": "succeeded", "result": 3}])
    assert (answer.pause, answer.abort) == (True, False)
    report(pulled, state="paused")
    progress = AgendaProgress.objects.get(agenda=pulled.agenda)
    assert (progress.state, progress.pause_requested, progress.attempts_completed) == (
        "paused",
        False,
        0,
    )
    assert fill(pulled.agenda.insight).moved == 0

    agenda_resume(principal=submitter.user, agenda=pulled.agenda)
    fill(insight)
    [again] = pull(insight)

    assert again.agenda.pk == pulled.agenda.pk
    assert again.execution.number == 2
    prior = {op.name: (op.state, op.result) for op in again.operations}
    assert prior == {"probe": ("succeeded", 3), "report": ("waiting", None)}
    events = CallbackDelivery.objects.filter(agenda=pulled.agenda).order_by("id")
    assert list(events.values_list("event", flat=True)) == ["executing", "paused", "executing"]


# --- reap ------------------------------------------------------------------------------------


def test_reap_deletes_old_terminal_agendas_only(
    submitter, other_submitter, submit_agenda, insight, fill, pull, report, other_customer
):
    other_customer.data_ttl_days = 60
    other_customer.save()
    old = timezone.now() - timedelta(days=45)
    with time_machine.travel(old, tick=False):
        done = submit_agenda(submitter, callback_url="https://h.example/cb")
        theirs = submit_agenda(other_submitter)
        waiting = submit_agenda(submitter)
        held = submit_agenda(submitter, do_not_run=True)
        fill(insight)
        items = {item.agenda.pk: item for item in pull(insight, count=2)}
        report(items[done.pk], state="succeeded")
        report(items[theirs.pk], state="succeeded")
        executing = submit_agenda(submitter)
        fill(insight)
        pull(insight, count=10)
        paused = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=paused)
    recent = submit_agenda(submitter)
    fill(insight)
    [recent_item] = [item for item in pull(insight) if item.agenda.pk == recent.pk]
    report(recent_item, state="failed")
    agenda_abort(principal=submitter.user, agenda=recent)  # terminal, but young

    assert timed.agendas_reap(batch_size=1) == 1

    remaining = set(Agenda.objects.values_list("pk", flat=True))
    assert done.pk not in remaining
    assert {theirs.pk, waiting.pk, held.pk, executing.pk, paused.pk, recent.pk} <= remaining
    assert Execution.objects.filter(agenda_id=done.pk).exists() is False
    assert CallbackDelivery.objects.filter(agenda_id=done.pk).exists() is False
    assert OperationProgress.objects.filter(agenda_progress__agenda_id=done.pk).exists() is False


def test_an_abort_asked_while_the_worker_pauses_ends_aborted(submitter, run_one, insight, report):
    pulled = run_one(submitter, insight)
    agenda_pause(principal=submitter.user, agenda=pulled.agenda)
    agenda_abort(principal=submitter.user, agenda=pulled.agenda)

    assert report(pulled, state="paused").state == "aborted"
    progress = AgendaProgress.objects.get(agenda=pulled.agenda)
    assert (progress.abort_requested, progress.pause_requested) == (False, False)
