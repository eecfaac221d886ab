"""Timed processes: pop_schedules registration and the sub-minute ticker (docs/design.md §8)."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_q.models import OrmQ
from django_q.models import Schedule as QSchedule

from scheduling import fill as fill_service
from scheduling import tasks
from scheduling.recurring import RECURRING, TICKER_FUNC, TICKER_NAME, ticked
from tests.scheduling.conftest import state_of

pytestmark = pytest.mark.django_db


def _schedules() -> dict[str, tuple]:
    return {
        row.name: (row.func, row.schedule_type, row.minutes, row.repeats)
        for row in QSchedule.objects.all()
    }


def test_every_timed_process_is_declared_once():
    names = [entry.name for entry in RECURRING]
    funcs = [entry.func for entry in RECURRING]
    assert len(set(names)) == len(names)
    assert len(set(funcs)) == len(funcs)
    assert {"pop-fill", "pop-promote", "pop-reclaim", "pop-time-out", "pop-reap"} <= set(names)


def test_pop_schedules_registers_idempotently_and_removes_stale_ones():
    QSchedule.objects.create(name="pop-retired", func="scheduling.tasks.gone")
    QSchedule.objects.create(name="someone-elses", func="x.y")

    call_command("pop_schedules", "--no-start-ticker", stdout=open("/dev/null", "w"))
    first = _schedules()
    call_command("pop_schedules", "--no-start-ticker", stdout=open("/dev/null", "w"))

    assert _schedules() == first
    assert first == {
        TICKER_NAME: (TICKER_FUNC, QSchedule.MINUTES, 1, -1),
        "pop-time-out": ("scheduling.tasks.time_out", QSchedule.MINUTES, 1, -1),
        "pop-reap": ("scheduling.tasks.reap", QSchedule.MINUTES, 60, -1),
        "someone-elses": ("x.y", QSchedule.ONCE, None, -1),
    }
    assert OrmQ.objects.count() == 0


def test_pop_schedules_queues_a_ticker_to_start_at_once():
    call_command("pop_schedules", stdout=open("/dev/null", "w"))

    assert [task.task["func"] for task in OrmQ.objects.all()] == [TICKER_FUNC]


def test_sub_minute_periods_run_in_the_ticker(settings):
    settings.POP_RECLAIM_INTERVAL = 60.0

    names = [entry.name for entry in ticked()]
    assert {"pop-fill", "pop-promote"} <= set(names)
    assert {"pop-reclaim", "pop-time-out", "pop-reap"}.isdisjoint(names)


def test_a_ticker_link_runs_due_processes_and_queues_the_next_link(
    settings, submitter, submit_agenda, insight
):
    settings.POP_TICKER_LINK_SECONDS = 0.3
    settings.POP_FILL_INTERVAL = 0.1
    settings.POP_PROMOTE_INTERVAL = 0.1
    call_command("pop_schedules", "--no-start-ticker", stdout=open("/dev/null", "w"))
    agenda = submit_agenda(submitter)
    later = submit_agenda(submitter, run_after=timezone.now() + timedelta(milliseconds=100))

    assert tasks.ticker() == "renewed"

    assert (state_of(agenda), state_of(later)) == ("queued", "queued")
    [link] = [task.task for task in OrmQ.objects.all() if task.task["func"] == TICKER_FUNC]
    generation = QSchedule.objects.get(name=TICKER_NAME).next_run.isoformat()
    assert link["func"] == TICKER_FUNC
    assert link["args"][0] == generation
    assert set(link["args"][1]) == {entry.name for entry in ticked()}


def test_a_ticker_of_an_older_generation_stops(settings):
    settings.POP_TICKER_LINK_SECONDS = 0.2
    call_command("pop_schedules", "--no-start-ticker", stdout=open("/dev/null", "w"))

    assert tasks.ticker(generation="2001-01-01T00:00:00+00:00") == "superseded"
    assert OrmQ.objects.count() == 0  # ran nothing, queued nothing


def test_a_failing_process_does_not_stop_the_ticker(settings, monkeypatch, caplog):
    settings.POP_TICKER_LINK_SECONDS = 0.1
    ran = []

    def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(tasks, "fill", broken)
    monkeypatch.setattr(tasks, "promote", lambda: ran.append("promote"))

    assert tasks.ticker() == "renewed"

    assert ran
    assert "timed process pop-fill failed" in caplog.text


def test_the_periodic_fill_goes_on_past_an_insight_that_fails(
    submitter, submit_agenda, insight, transcode_insight, monkeypatch, caplog
):
    submit_agenda(submitter)
    submit_agenda(submitter, operations=[{"name": "t", "type": "transcode"}])
    real_fill = fill_service.insight_fill

    def fill_or_fail(*, insight_id, now=None):
        if insight_id == insight.pk:
            raise RuntimeError("broken insight")
        return real_fill(insight_id=insight_id, now=now)

    monkeypatch.setattr(fill_service, "insight_fill", fill_or_fail)

    assert tasks.fill() == 1
    assert f"fill of insight {insight.pk} failed" in caplog.text


def _failing_first(times: int, result):
    """A callable that raises OperationalError `times` times, then answers `result()`."""
    from django.db import OperationalError

    calls = []

    def call(*args, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise OperationalError("the database system is starting up")
        return result(*args, **kwargs)

    call.calls = calls
    return call


def test_a_database_outage_does_not_end_the_ticker_chain(settings, monkeypatch):
    settings.POP_TICKER_LINK_SECONDS = 0.3
    call_command("pop_schedules", "--no-start-ticker", stdout=open("/dev/null", "w"))
    monkeypatch.setattr(tasks, "OUTAGE_BACKOFF_SECONDS", (0.01,))
    generation = tasks.ticker_generation()
    flaky_generation = _failing_first(2, tasks.ticker_generation)
    flaky_enqueue = _failing_first(3, tasks.async_task)
    monkeypatch.setattr(tasks, "ticker_generation", flaky_generation)
    monkeypatch.setattr(tasks, "async_task", flaky_enqueue)

    assert tasks.ticker(generation=generation) == "renewed"

    assert len(flaky_generation.calls) >= 3 and len(flaky_enqueue.calls) >= 4
    links = [task.task for task in OrmQ.objects.all() if task.task["func"] == TICKER_FUNC]
    assert [link["args"][0] for link in links] == [generation]  # the chain goes on, once


def test_a_ticker_that_cannot_reach_the_database_in_time_says_it_broke(settings, monkeypatch):
    settings.POP_TICKER_LINK_SECONDS = 0.05
    monkeypatch.setattr(tasks, "OUTAGE_BACKOFF_SECONDS", (0.01,))
    monkeypatch.setattr(tasks, "TICKER_ENQUEUE_SECONDS", 0.1)
    call_command("pop_schedules", "--no-start-ticker", stdout=open("/dev/null", "w"))
    monkeypatch.setattr(tasks, "async_task", _failing_first(10**6, lambda *a, **k: None))

    assert tasks.ticker(generation=tasks.ticker_generation()) == "broken"


def test_the_task_queue_answers_nothing_during_an_outage_instead_of_stopping_for_10_s(
    monkeypatch,
):
    import time

    from django.db import OperationalError
    from django_q.brokers.orm import ORM

    from scheduling import q_broker

    def down(self):
        raise OperationalError("connection refused")

    monkeypatch.setattr(ORM, "dequeue", down)
    monkeypatch.setattr(q_broker, "RETRY_SECONDS", 0.05)
    started = time.monotonic()

    assert q_broker.OutageTolerantORM(list_key="pop").dequeue() is None
    assert time.monotonic() - started < 1.0
