"""Real PostgreSQL, real threads: two clusters' cron passes fire a due schedule exactly once."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agendas.models import Agenda
from scheduling.cron_services import CronRun, schedules_run_due
from tests.threads import all_at_once

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]
SCHEDULES = 30
PASSES = 4


def test_concurrent_cron_passes_fire_every_due_schedule_exactly_once(make_schedule):
    schedules = [
        make_schedule(name=f"every minute {n}", cron="* * * * *") for n in range(SCHEDULES)
    ]
    due_at = max(schedule.next_run_at for schedule in schedules) + timedelta(seconds=1)
    results = all_at_once(PASSES, schedules_run_due, now=due_at)

    assert sum(result.fired for result in results) == SCHEDULES
    assert sum(result.failed for result in results) == 0
    per_schedule = {schedule.pk: 0 for schedule in schedules}
    for schedule_id in Agenda.objects.values_list("schedule_id", flat=True):
        per_schedule[schedule_id] += 1
    assert set(per_schedule.values()) == {1}
    # A later pass at the same moment finds nothing left to do.
    assert schedules_run_due(now=due_at) == CronRun()


def test_the_due_schedule_is_locked_with_skip_locked_before_it_is_moved_on(make_schedule):
    schedule = make_schedule(cron="* * * * *")

    with CaptureQueriesContext(connection) as queries:
        schedules_run_due(now=schedule.next_run_at + timedelta(seconds=1))

    sql = [query["sql"] for query in queries.captured_queries]
    lock = next(i for i, text in enumerate(sql) if "FOR UPDATE SKIP LOCKED" in text)
    move = next(i for i, text in enumerate(sql) if text.startswith('UPDATE "scheduling_schedule"'))
    assert '"scheduling_schedule"' in sql[lock]
    assert lock < move
