"""Fill nudges are deferred, not dropped (docs/design.md §6.2): a nudge inside the throttle window
arms one trailing nudge for the window's end, and an empty pull of an insight with ready work
nudges too."""

import os
import threading
import time

import pytest
from django.db import connection
from django_q.models import OrmQ

from agendas import fill_nudge
from agendas.models import AgendaProgress
from scheduling import pull as pull_service
from scheduling.models import QueuedAgenda

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _cluster_takes_every_task_at_once(monkeypatch):
    # These tests count the tasks the trailing nudges enqueue; a cluster that starts each task
    # at once never has one waiting, so cross-process coalescing (test_fill_nudges.py) never
    # holds one back.
    monkeypatch.setattr(fill_nudge, "_nudge_pending_claim", lambda insight_id: True)


@pytest.fixture(autouse=True)
def _fresh_nudges():
    fill_nudge.fill_nudges_cancel()
    yield
    fill_nudge.fill_nudges_cancel()


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the trailing nudge's thread needs a shared database"
)
@pytest.mark.django_db(transaction=True)
def test_a_burst_inside_the_throttle_window_is_filled_by_the_trailing_nudge(
    settings, submitter, submit_agenda, insight
):
    settings.POP_FILL_NUDGE = "sync"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 1.0
    began = time.monotonic()

    agendas = [submit_agenda(submitter) for _ in range(5)]

    # The first submit's nudge filled at once; the rest of the burst fell in its window.
    assert time.monotonic() - began < 1.0, "the burst took longer than the throttle window"
    states_now = dict(AgendaProgress.objects.values_list("agenda_id", "state"))
    assert states_now[agendas[0].pk] == "queued"
    assert states_now[agendas[-1].pk] == "ready"
    assert list(fill_nudge._trailing_nudges) == [str(insight.pk)]
    # One trailing nudge at the window's end covers the whole burst, the last submit included.
    assert _wait_for(lambda: QueuedAgenda.objects.count() == 5, 5.0)
    assert time.monotonic() - began >= 1.0
    assert set(AgendaProgress.objects.values_list("state", flat=True)) == {"queued"}
    assert fill_nudge._trailing_nudges == {}


def test_nudges_inside_the_window_arm_one_trailing_nudge_and_enqueue_one_fill(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 60

    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            submit_agenda(submitter)

    assert OrmQ.objects.count() == 1
    assert list(fill_nudge._trailing_nudges) == [str(insight.pk)]


def test_the_trailing_nudge_enqueues_the_fill_when_it_fires(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 60
    with django_capture_on_commit_callbacks(execute=True):
        submit_agenda(submitter)
        submit_agenda(submitter)
    [(due_at, mode)] = fill_nudge._trailing_nudges.values()
    assert (mode, due_at > time.monotonic() + 50) == ("async", True)
    fill_nudge.fill_nudges_cancel()  # send it here, on this test's connection, instead of in 60 s
    fill_nudge._fill_nudge_send([str(insight.pk)], "async")

    assert [task.task["args"] for task in OrmQ.objects.all()] == [(str(insight.pk),)] * 2


def test_an_empty_pull_of_an_insight_with_ready_work_fills_inline_takes_it_and_nudges(
    settings, submitter, submit_agenda, insight, pull, django_capture_on_commit_callbacks
):
    agenda = submit_agenda(submitter)  # nudges off: it stays ready, the queue empty
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0

    with django_capture_on_commit_callbacks(execute=True):
        [pulled] = pull(insight)

    assert pulled.agenda.pk == agenda.pk
    assert AgendaProgress.objects.get(agenda=agenda).state == "executing"
    # The claim still nudges, for the queue that the next pull will find short.
    assert [task.task["args"] for task in OrmQ.objects.all()] == [(str(insight.pk),)]


def test_an_empty_pull_without_ready_work_does_not_nudge(
    settings, insight, pull, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert pull(insight) == []

    assert callbacks == []
    assert OrmQ.objects.count() == 0


def test_a_pull_nudges_exactly_when_it_leaves_the_queue_under_half_full(
    settings, submitter, submit_agenda, insight, fill, django_capture_on_commit_callbacks
):
    insight.queue_size = 5
    insight.save()
    for _ in range(9):
        submit_agenda(submitter)
    fill(insight)
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0

    def pull(count: int) -> int:
        with django_capture_on_commit_callbacks(execute=True):
            pull_service.insight_pull_once(insight=insight, worker="w1", count=count)
        return OrmQ.objects.count()

    assert pull(2) == 0  # 3 of 5 left
    assert pull(1) == 1  # 2 of 5 left: under half
    assert QueuedAgenda.objects.count() == 2


def test_a_forked_child_forgets_the_parents_pending_trailing_nudge(
    settings, submitter, submit_agenda, insight, django_capture_on_commit_callbacks
):
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 60
    with django_capture_on_commit_callbacks(execute=True):
        submit_agenda(submitter)
        submit_agenda(submitter)
    assert list(fill_nudge._trailing_nudges) == [str(insight.pk)]

    child = os.fork()
    if child == 0:  # the child: its parent's nudge thread does not exist here
        os._exit(
            0 if fill_nudge._trailing_nudges == {} and not fill_nudge._nudge_lock.locked() else 1
        )
    _, status = os.waitpid(child, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert list(fill_nudge._trailing_nudges) == [str(insight.pk)]  # the parent's still pending


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the trailing nudge's thread needs a shared database"
)
@pytest.mark.django_db(transaction=True)
def test_trailing_nudges_are_sent_by_one_thread_on_one_database_connection(
    settings, monkeypatch, submitter, submit_agenda, insight
):
    settings.POP_FILL_NUDGE = "async"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0.3
    sent = []
    send = fill_nudge._fill_nudge_send

    def recording_send(insight_ids, mode):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            sent.append((threading.get_ident(), cursor.fetchone()[0]))
        send(insight_ids, mode)

    monkeypatch.setattr(fill_nudge, "_fill_nudge_send", recording_send)
    here = threading.get_ident()

    submit_agenda(submitter)  # nudges at once
    submit_agenda(submitter)  # inside the window: arms a trailing nudge
    assert _wait_for(lambda: OrmQ.objects.count() == 2, 5.0)
    submit_agenda(submitter)  # inside the trailing nudge's own window: arms another
    assert _wait_for(lambda: OrmQ.objects.count() == 3, 5.0)

    trailing = [entry for entry in sent if entry[0] != here]
    assert len(trailing) >= 2, sent
    assert len(set(trailing)) == 1, f"trailing nudges used several threads or connections: {sent}"
