"""Fill nudges (docs/design.md §6.2): on commit, when work becomes ready or a pull drains a
queue."""

import pytest
from django_q.models import OrmQ

from agendas import fill_nudge
from agendas.models import AgendaProgress
from scheduling.models import QueuedAgenda
from tests.scheduling.conftest import state_of

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttle():
    fill_nudge._last_nudge.clear()
    yield
    fill_nudge._last_nudge.clear()


def _queued_fill_tasks() -> list[str]:
    return [
        task.func() if callable(task.func) else task.task()["func"] for task in OrmQ.objects.all()
    ]


def test_submit_nudges_a_fill_of_its_insight_after_commit(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        submit_agenda(submitter)

    assert len(callbacks) == 1
    tasks = [task.task for task in OrmQ.objects.all()]
    assert [(task["func"], task["args"]) for task in tasks] == [
        (settings.POP_FILL_NUDGE_TASK, (str(insight.pk),))
    ]


def test_sync_nudge_makes_a_submitted_agenda_pullable_at_once(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "sync"

    with django_capture_on_commit_callbacks(execute=True):
        agenda = submit_agenda(submitter)

    assert state_of(agenda) == "queued"


def test_no_nudge_when_the_queue_is_full(
    settings, submitter, submit_agenda, insight, fill, django_capture_on_commit_callbacks
):
    insight.queue_size = 1
    insight.save()
    submit_agenda(submitter)
    fill(insight)
    settings.POP_FILL_NUDGE = "async"

    with django_capture_on_commit_callbacks(execute=True):
        submit_agenda(submitter)

    assert OrmQ.objects.count() == 0


def test_nudges_of_one_insight_are_throttled(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 60

    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            submit_agenda(submitter)

    assert OrmQ.objects.count() == 1


def test_a_pull_that_leaves_the_queue_under_half_full_nudges(
    settings, submitter, submit_agenda, insight, fill, pull, django_capture_on_commit_callbacks
):
    insight.queue_size = 4
    insight.save()
    for _ in range(8):
        submit_agenda(submitter)
    fill(insight)
    settings.POP_FILL_NUDGE = "sync"

    with django_capture_on_commit_callbacks(execute=True):
        pull(insight, count=1)  # 3 of 4 left: no nudge
    assert QueuedAgenda.objects.count() == 3
    with django_capture_on_commit_callbacks(execute=True):
        pull(insight, count=2)  # 1 of 4 left: refilled at once

    assert QueuedAgenda.objects.count() == 4
    assert AgendaProgress.objects.filter(state__in=["ready"]).count() == 1


def test_nudges_wait_as_one_task_per_insight_while_the_cluster_is_away(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0  # no per-process throttle: only the coalescing

    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(20):
            submit_agenda(submitter)

    assert OrmQ.objects.count() == 1


def test_a_started_fill_task_lets_the_next_nudge_enqueue_again(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    from scheduling.tasks import insight_fill as insight_fill_task

    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    with django_capture_on_commit_callbacks(execute=True):
        submit_agenda(submitter)
    insight_fill_task(str(insight.pk))  # what the cluster runs

    with django_capture_on_commit_callbacks(execute=True):
        submit_agenda(submitter)

    assert OrmQ.objects.count() == 2


def test_a_pending_nudge_too_old_to_trust_no_longer_holds_others_back(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from agendas.models import PendingFillNudge

    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    PendingFillNudge.objects.create(
        insight=insight,
        enqueued_at=timezone.now() - timedelta(seconds=fill_nudge.NUDGE_PENDING_SECONDS + 1),
    )

    with django_capture_on_commit_callbacks(execute=True):
        submit_agenda(submitter)

    assert OrmQ.objects.count() == 1
