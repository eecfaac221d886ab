"""The callbacks, cron and alerts timed processes are declared once and call their services."""

from datetime import timedelta

import pytest
import time_machine

from agendas.models import Agenda
from scheduling import tasks
from scheduling.recurring import RECURRING, ticked

pytestmark = pytest.mark.django_db


def test_callbacks_cron_and_alerts_run_in_the_ticker_at_their_configured_periods(settings):
    settings.POP_CALLBACK_INTERVAL = 3.0
    settings.POP_CRON_INTERVAL = 12.0
    settings.POP_ALERT_INTERVAL = 45.0
    entries = {entry.name: entry for entry in RECURRING}

    assert {
        name: (entries[name].func, entries[name].period, entries[name].run)
        for name in (
            "pop-callbacks",
            "pop-cron",
            "pop-alerts",
        )
    } == {
        "pop-callbacks": ("scheduling.tasks.callbacks", 3.0, "enqueue"),
        "pop-cron": ("scheduling.tasks.cron", 12.0, "inline"),
        "pop-alerts": ("scheduling.tasks.alerts", 45.0, "enqueue"),
    }
    assert {"pop-callbacks", "pop-cron", "pop-alerts"} <= {entry.name for entry in ticked()}


def test_the_cron_task_fires_due_schedules(make_schedule):
    schedule = make_schedule(cron="*/5 * * * *")
    with time_machine.travel(schedule.next_run_at + timedelta(seconds=2), tick=False):
        assert tasks.cron() == 1
        assert tasks.cron() == 0
    assert Agenda.objects.filter(schedule=schedule).count() == 1


def test_the_callbacks_and_alerts_tasks_are_safe_with_nothing_to_do():
    assert tasks.callbacks() == 0
    assert tasks.alerts() == 0
