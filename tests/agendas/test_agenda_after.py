"""Agendas that wait for other agendas (`after` at submit; docs/design.md §5.1, §6.5): they stay
pending until the agendas they wait for reach `on`, then become ready in the same transaction
as the last one; a failure of one fails (or aborts) them with its reason."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from agendas.bulk_actions import agenda_action_jobs_run, agenda_action_start
from agendas.models import (
    Agenda,
    AgendaDependency,
    AgendaProgress,
    AgendaWait,
    OperationProgress,
)
from agendas.services import agenda_abort, agenda_pause, agenda_rerun, agenda_resume
from agendas.waiting import waiting_reason
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling import report as report_service
from scheduling import timed
from scheduling.models import CallbackDelivery, ReadyAgenda

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def finish(insight, worker):
    """Run the given ready agendas to the end through fill, pull and report."""

    def run(*agendas: Agenda, state: str = "succeeded", **fields) -> None:
        insight.queue_size = 100
        insight.save()
        fill_service.insight_fill(insight_id=insight.pk)
        pulled = pull_service.insight_pull(
            principal=worker.user, insight=insight, worker="w1", count=100
        )
        wanted = {agenda.pk for agenda in agendas}
        by_agenda = {item.agenda.pk: item.execution for item in pulled}
        assert wanted <= set(by_agenda), "an agenda to finish was not pulled"
        for agenda_id in wanted:
            execution = by_agenda[agenda_id]
            report_service.execution_report(
                execution_id=execution.pk,
                lease_token=execution.lease_token,
                state=state,
                retryable=False if state == "failed" else None,
                **fields,
            )
        # What was pulled but not asked for goes back to ready, so later fills see it again.
        for agenda_id, execution in by_agenda.items():
            if agenda_id not in wanted:
                report_service.execution_report(
                    execution_id=execution.pk, lease_token=execution.lease_token, state="paused"
                )
                agenda_resume(principal=_owner(agenda_id), agenda=Agenda.objects.get(pk=agenda_id))

    return run


_OWNERS: dict = {}


def _owner(agenda_id):
    return _OWNERS[Agenda.objects.get(pk=agenda_id).customer_id]


@pytest.fixture(autouse=True)
def _owners(submitter, other_submitter):
    _OWNERS[submitter.customer.pk] = submitter.user
    _OWNERS[other_submitter.customer.pk] = other_submitter.user


def _state(agenda: Agenda) -> str:
    return AgendaProgress.objects.get(agenda=agenda).state


def _progress(agenda: Agenda) -> AgendaProgress:
    return AgendaProgress.objects.select_related("agenda__customer", "agenda__insight").get(
        agenda=agenda
    )


def test_agenda_after_two_others_waits_pending_and_says_for_how_many(submitter, submit_agenda):
    first, second = submit_agenda(submitter), submit_agenda(submitter)

    waiter = submit_agenda(submitter, after={"agendas": [first.pk, second.pk]})

    progress = _progress(waiter)
    assert progress.state == "pending"
    assert progress.run_after is None
    assert progress.message == "waiting for 2 agendas"
    assert ReadyAgenda.objects.filter(agenda=waiter).exists() is False
    reason = waiting_reason(progress)
    assert reason["code"] == "waiting_for_agendas"
    assert reason["message"].startswith("waiting for 2 agendas")
    assert reason["detail"]["remaining"] == 2
    assert sorted(reason["detail"]["agendas"]) == sorted([str(first.pk), str(second.pk)])


def test_waiter_becomes_ready_when_the_last_agenda_succeeds_not_before(
    submitter, submit_agenda, finish
):
    first, second = submit_agenda(submitter), submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [first.pk, second.pk]})

    finish(first)

    assert _state(waiter) == "pending"
    assert AgendaProgress.objects.get(agenda=waiter).message == "waiting for 1 agenda"
    assert AgendaWait.objects.get(agenda=waiter).remaining == 1

    finish(second)

    progress = AgendaProgress.objects.get(agenda=waiter)
    assert progress.state == "ready"
    assert progress.message == "ready: the agendas it waited for finished"
    assert ReadyAgenda.objects.filter(agenda=waiter).count() == 1
    wait = AgendaWait.objects.get(agenda=waiter)
    assert (wait.remaining, wait.ended_at is not None) == (0, True)


def test_only_agendas_something_waits_for_are_marked_to_look_for_waiters(submitter, submit_agenda):
    upstream, unrelated = submit_agenda(submitter), submit_agenda(submitter)

    submit_agenda(submitter, after={"agendas": [upstream.pk]})

    marks = dict(
        AgendaProgress.objects.filter(agenda__in=[upstream, unrelated]).values_list(
            "agenda_id", "has_waiters"
        )
    )
    assert marks == {upstream.pk: True, unrelated.pk: False}


def test_a_waiter_submitted_while_its_agenda_runs_is_released_by_that_run(
    submitter, submit_agenda, insight, worker
):
    upstream = submit_agenda(submitter)
    fill_service.insight_fill(insight_id=insight.pk)
    (pulled,) = pull_service.insight_pull(
        principal=worker.user, insight=insight, worker="w1", count=1
    )
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})

    report_service.execution_report_batch(
        reports=[
            {
                "execution": pulled.execution.pk,
                "lease_token": pulled.execution.lease_token,
                "state": "succeeded",
            }
        ]
    )

    assert _state(upstream) == "succeeded"
    assert _state(waiter) == "ready"
    assert AgendaDependency.objects.get(waiter=waiter).finished_at is not None


def test_failure_of_one_agenda_fails_the_waiter_with_its_reason(submitter, submit_agenda, finish):
    first, second = submit_agenda(submitter), submit_agenda(submitter)
    waiter = submit_agenda(
        submitter,
        after={"agendas": [first.pk, second.pk]},
        callback_url="https://hooks.example.com/pop",
    )

    finish(first, state="failed", message="disk full")

    progress = AgendaProgress.objects.get(agenda=waiter)
    assert progress.state == "failed"
    assert (
        progress.message == f"failed: agenda {first.pk} it waited for ended failed, not succeeded"
    )
    assert progress.completed_at is not None
    assert list(CallbackDelivery.objects.filter(agenda=waiter).values_list("event", flat=True)) == [
        "failed"
    ]
    assert AgendaWait.objects.get(agenda=waiter).ended_at is not None
    assert ReadyAgenda.objects.filter(agenda=waiter).exists() is False
    # The second one finishing later changes nothing for the failed waiter.
    finish(second)
    assert AgendaProgress.objects.get(agenda=waiter).state == "failed"


def test_on_failure_abort_aborts_the_waiter_and_its_operations(submitter, submit_agenda, finish):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk], "on_failure": "abort"})

    finish(upstream, state="failed")

    assert _state(waiter) == "aborted"
    assert set(
        OperationProgress.objects.filter(agenda_progress__agenda=waiter).values_list(
            "state", flat=True
        )
    ) == {"aborted"}


def test_on_completed_releases_the_waiter_when_the_agenda_fails(submitter, submit_agenda, finish):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk], "on": "completed"})

    finish(upstream, state="failed")

    assert _state(waiter) == "ready"


def test_aborting_an_upstream_fails_a_chain_of_waiters_in_one_go(submitter, submit_agenda):
    head = submit_agenda(submitter)
    chain = [head]
    for _ in range(5):
        chain.append(submit_agenda(submitter, after={"agendas": [chain[-1].pk]}))

    agenda_abort(principal=submitter.user, agenda=head)

    assert [_state(agenda) for agenda in chain] == ["aborted"] + ["failed"] * 5
    assert AgendaWait.objects.filter(ended_at__isnull=True).count() == 0


def test_upstreams_already_succeeded_at_submit_count_at_once(submitter, submit_agenda, finish):
    done, running = submit_agenda(submitter), submit_agenda(submitter)
    finish(done)

    waiter = submit_agenda(submitter, after={"agendas": [done.pk, running.pk]})
    all_done = submit_agenda(submitter, after={"agendas": [done.pk]})

    assert AgendaWait.objects.get(agenda=waiter).remaining == 1
    assert _state(waiter) == "pending"
    assert _state(all_done) == "ready"
    assert ReadyAgenda.objects.filter(agenda=all_done).count() == 1


def test_an_upstream_already_failed_at_submit_fails_the_new_agenda_at_once(
    submitter, submit_agenda, finish
):
    failed = submit_agenda(submitter)
    finish(failed, state="failed")

    waiter = submit_agenda(submitter, after={"agendas": [failed.pk]})

    progress = AgendaProgress.objects.get(agenda=waiter)
    assert progress.state == "failed"
    assert str(failed.pk) in progress.message
    assert ReadyAgenda.objects.filter(agenda=waiter).exists() is False


def test_link_ids_resolve_to_the_customers_agendas_with_them(
    submitter, other_submitter, submit_agenda, finish
):
    batch = [submit_agenda(submitter, link_id="batch-7") for _ in range(3)]
    submit_agenda(other_submitter, link_id="batch-7")  # another customer's: never waited for

    waiter = submit_agenda(submitter, after={"link_ids": ["batch-7"]})

    assert set(
        AgendaDependency.objects.filter(waiter=waiter).values_list("upstream", flat=True)
    ) == {agenda.pk for agenda in batch}
    finish(*batch)
    assert _state(waiter) == "ready"


def _nothing_submitted() -> None:
    assert Agenda.objects.filter(link_id="refused").exists() is False
    assert AgendaWait.objects.count() == 0
    assert AgendaDependency.objects.count() == 0


def test_another_customers_agenda_is_refused_like_a_missing_one(
    submitter, other_submitter, submit_agenda
):
    foreign = submit_agenda(other_submitter)
    missing = "00000000-0000-0000-0000-000000000001"
    before = Agenda.objects.count()

    messages = []
    for agenda_id in (foreign.pk, missing):
        with pytest.raises(ValidationError) as raised:
            submit_agenda(submitter, link_id="refused", after={"agendas": [agenda_id]})
        [message] = raised.value.message_dict["after.agendas"]
        messages.append(message.replace(str(agenda_id), "ID"))

    assert messages[0] == messages[1] == "Customer acme has no agenda with id ID."
    assert Agenda.objects.count() == before
    _nothing_submitted()


@pytest.mark.parametrize(
    ("after", "field"),
    [
        ({}, "after"),
        ({"agendas": []}, "after"),
        ({"link_ids": ["no-such-link"]}, "after.link_ids"),
        ({"agendas": ["not-a-uuid"]}, "after.agendas"),
        ({"agendas": ["00000000-0000-0000-0000-000000000001"] * 1001}, "after.agendas"),
        ({"link_ids": ["a"] * 101}, "after.link_ids"),
        ({"on": "sometime"}, "after.on"),
        ({"on_failure": "panic"}, "after.on_failure"),
        ({"agendas": [], "extra": 1}, "after"),
        ("soon", "after"),
    ],
)
def test_bad_after_is_refused_naming_the_field_and_changes_nothing(
    submitter, submit_agenda, after, field
):
    with pytest.raises(ValidationError) as raised:
        submit_agenda(submitter, link_id="refused", after=after)

    assert field in raised.value.message_dict
    _nothing_submitted()


def test_link_ids_naming_over_a_thousand_agendas_are_refused(submitter, submit_agenda):
    agenda = submit_agenda(submitter, link_id="huge")
    # Only agenda rows matter to the resolution: plain copies, no progress needed.
    Agenda.objects.bulk_create(
        Agenda(
            customer_id=agenda.customer_id,
            insight_id=agenda.insight_id,
            operations=agenda.operations,
            link_id="huge",
        )
        for _ in range(1000)
    )

    with pytest.raises(ValidationError) as raised:
        submit_agenda(submitter, link_id="refused", after={"link_ids": ["huge"]})

    assert "after.link_ids" in raised.value.message_dict
    _nothing_submitted()


def test_paused_waiter_stays_paused_on_release_and_resumes_to_ready(
    submitter, submit_agenda, finish
):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})
    agenda_pause(principal=submitter.user, agenda=waiter)

    finish(upstream)

    assert _state(waiter) == "paused"
    agenda_resume(principal=submitter.user, agenda=waiter)
    assert _state(waiter) == "ready"


def test_resuming_a_waiter_whose_agendas_are_outstanding_puts_it_back_to_pending(
    submitter, submit_agenda, finish
):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})
    agenda_pause(principal=submitter.user, agenda=waiter)

    agenda_resume(principal=submitter.user, agenda=waiter)

    assert _state(waiter) == "pending"
    assert ReadyAgenda.objects.filter(agenda=waiter).exists() is False
    finish(upstream)
    assert _state(waiter) == "ready"


def test_rerun_of_a_held_waiter_keeps_it_waiting(submitter, submit_agenda, finish):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]}, do_not_run=True)

    agenda_rerun(principal=submitter.user, agenda=waiter)

    progress = AgendaProgress.objects.get(agenda=waiter)
    assert (progress.state, progress.do_not_run) == ("pending", False)
    finish(upstream)
    assert _state(waiter) == "ready"


def test_aborting_the_waiter_ends_its_wait_and_a_later_finish_changes_nothing(
    submitter, submit_agenda, finish
):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})

    agenda_abort(principal=submitter.user, agenda=waiter)

    assert AgendaWait.objects.get(agenda=waiter).ended_at is not None
    finish(upstream)
    assert _state(waiter) == "aborted"
    assert ReadyAgenda.objects.filter(agenda=waiter).exists() is False


def test_promote_never_promotes_a_waiter_and_run_after_applies_once_released(
    submitter, submit_agenda, finish
):
    upstream = submit_agenda(submitter)
    later = timezone.now() + timedelta(minutes=5)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]}, run_after=later)

    assert timed.agendas_promote(now=later + timedelta(minutes=1)) == 0
    assert _state(waiter) == "pending"

    finish(upstream)

    progress = AgendaProgress.objects.get(agenda=waiter)
    assert (progress.state, progress.run_after) == ("pending", later)
    assert timed.agendas_promote(now=later + timedelta(seconds=1)) == 1
    assert _state(waiter) == "ready"


def test_a_rerun_of_the_upstream_changes_nothing_for_a_released_waiter(
    submitter, submit_agenda, finish
):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})
    finish(upstream)
    assert _state(waiter) == "ready"
    ready_rows = list(ReadyAgenda.objects.filter(agenda=waiter).values_list("pk", flat=True))

    agenda_rerun(principal=submitter.user, agenda=upstream)
    agenda_abort(principal=submitter.user, agenda=upstream)

    assert _state(waiter) == "ready"
    assert list(ReadyAgenda.objects.filter(agenda=waiter).values_list("pk", flat=True)) == (
        ready_rows
    )


def test_aborting_a_set_of_upstreams_and_waiters_together_fails_or_ends_each_wait_once(
    submitter, submit_agenda
):
    upstreams = [submit_agenda(submitter, link_id="set") for _ in range(3)]
    inside = submit_agenda(submitter, link_id="set", after={"link_ids": ["set"]})
    outside = submit_agenda(
        submitter, after={"agendas": [upstreams[0].pk]}, callback_url="https://hooks.example.com/p"
    )
    job = agenda_action_start(
        principal=submitter.user, action="abort", selection={"filter": {"link_id": "set"}}
    )

    agenda_action_jobs_run(job_id=job.pk)

    assert {_state(agenda) for agenda in [*upstreams, inside]} == {"aborted"}
    progress = AgendaProgress.objects.get(agenda=outside)
    assert progress.state == "failed"
    assert str(upstreams[0].pk) in progress.message
    assert list(
        CallbackDelivery.objects.filter(agenda=outside).values_list("event", flat=True)
    ) == ["failed"]
    assert AgendaWait.objects.filter(ended_at__isnull=True).count() == 0


def test_a_timed_out_upstream_fails_its_waiter(submitter, submit_agenda, insight, worker):
    insight.max_execution_seconds = 60
    insight.save()
    upstream = submit_agenda(submitter, max_attempts=1)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})
    fill_service.insight_fill(insight_id=insight.pk)
    pull_service.insight_pull(principal=worker.user, insight=insight, worker="w1", count=1)

    timed.executions_time_out(now=timezone.now() + timedelta(seconds=61))

    assert _state(upstream) == "failed"
    assert _state(waiter) == "failed"


def test_a_paused_waiter_fails_when_its_upstream_fails(submitter, submit_agenda, finish):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})
    agenda_pause(principal=submitter.user, agenda=waiter)

    finish(upstream, state="failed")

    progress = AgendaProgress.objects.get(agenda=waiter)
    assert (progress.state, progress.completed_at is not None) == ("failed", True)
    assert str(upstream.pk) in progress.message
