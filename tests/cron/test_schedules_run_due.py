"""The cron pass: fire due schedules once, catch up or skip, overlap, pause, expiry."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.core.exceptions import ValidationError

from agendas.models import AgendaProgress
from agendas.services import agenda_abort
from scheduling.cron_services import CronRun, schedules_run_due
from scheduling.models import Schedule
from scheduling.schedule_services import schedule_pause, schedule_resume, schedule_update
from tests.cron.conftest import runs_of

pytestmark = pytest.mark.django_db


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def test_a_due_schedule_fires_once_and_plans_its_next_run(make_schedule, customer, template):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule()
        assert schedule.next_run_at == utc(2026, 5, 4, 10)
        assert schedules_run_due() == CronRun()  # not due yet
        clock.move_to(utc(2026, 5, 4, 10, 0, 4))

        assert schedules_run_due() == CronRun(fired=1)
        assert schedules_run_due() == CronRun()

    [agenda] = runs_of(schedule)
    assert agenda.customer == customer
    assert agenda.template == template
    assert agenda.operations[0]["payload"] == {"url": "s3://in/daily.mp4"}
    assert AgendaProgress.objects.get(agenda=agenda).state == "ready"
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2026, 5, 4, 11)
    assert schedule.last_run_at == utc(2026, 5, 4, 10, 0, 4)
    assert schedule.state == "active"


def test_runs_follow_the_schedules_time_zone_across_a_dst_change(make_schedule):
    # 09:00 in New York: 14:00 UTC before 2026-03-08, 13:00 UTC after.
    with time_machine.travel(utc(2026, 3, 7, 12), tick=False) as clock:
        schedule = make_schedule(cron="0 9 * * *", timezone="America/New_York")
        assert schedule.next_run_at == utc(2026, 3, 7, 14)
        clock.move_to(utc(2026, 3, 7, 14, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        schedule.refresh_from_db()
        assert schedule.next_run_at == utc(2026, 3, 8, 13)
        clock.move_to(utc(2026, 3, 8, 13, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        schedule.refresh_from_db()
        assert schedule.next_run_at == utc(2026, 3, 9, 13)
    assert len(runs_of(schedule)) == 2


@pytest.mark.parametrize(("catch_up", "fired"), [("skip", 0), ("once", 1)])
def test_after_downtime_skip_drops_the_missed_runs_and_once_runs_them_once(
    make_schedule, catch_up, fired
):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(catch_up=catch_up)
        clock.move_to(utc(2026, 5, 4, 13, 20))  # 10:00, 11:00, 12:00 and 13:00 were missed

        result = schedules_run_due()

    expected = CronRun(fired=1) if fired else CronRun(skipped=1)
    assert result == expected
    assert len(runs_of(schedule)) == fired
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2026, 5, 4, 14)
    assert schedule.last_run_at == (utc(2026, 5, 4, 13, 20) if fired else None)


@pytest.mark.parametrize("catch_up", ["skip", "once"])
def test_after_downtime_a_run_due_just_now_fires_once_whatever_catch_up_says(
    make_schedule, catch_up
):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(catch_up=catch_up)
        clock.move_to(utc(2026, 5, 4, 13, 0, 20))  # missed 10–12, 13:00 is within the grace

        assert schedules_run_due() == CronRun(fired=1)
        assert schedules_run_due() == CronRun()

    assert len(runs_of(schedule)) == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2026, 5, 4, 14)


def test_overlap_skip_leaves_out_runs_while_the_previous_run_is_unfinished(
    make_schedule, submitter
):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(overlap="skip")
        clock.move_to(utc(2026, 5, 4, 10, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        [first] = runs_of(schedule)

        clock.move_to(utc(2026, 5, 4, 11, 0, 5))
        assert schedules_run_due() == CronRun(skipped=1)  # the 10:00 run is still ready
        assert runs_of(schedule) == [first]
        schedule.refresh_from_db()
        assert schedule.next_run_at == utc(2026, 5, 4, 12)
        assert schedule.last_run_at == utc(2026, 5, 4, 10, 0, 5)

        agenda_abort(principal=submitter.user, agenda=first)
        clock.move_to(utc(2026, 5, 4, 12, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)

    assert len(runs_of(schedule)) == 2


def test_overlap_allow_fires_even_while_the_previous_run_is_unfinished(make_schedule):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(overlap="allow")
        for hour in (10, 11, 12):
            clock.move_to(utc(2026, 5, 4, hour, 0, 5))
            assert schedules_run_due() == CronRun(fired=1)

    runs = runs_of(schedule)
    assert len(runs) == 3
    assert {AgendaProgress.objects.get(agenda=agenda).state for agenda in runs} == {"ready"}


def test_a_paused_schedule_does_not_fire_and_resumes_from_now_without_the_missed_runs(
    make_schedule, admin_member
):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(catch_up="once")
        schedule_pause(principal=admin_member.user, schedule=schedule)
        clock.move_to(utc(2026, 5, 4, 10, 0, 5))
        assert schedules_run_due() == CronRun()
        clock.move_to(utc(2026, 5, 4, 11, 30))
        assert schedules_run_due() == CronRun()
        assert runs_of(schedule) == []

        schedule = schedule_resume(principal=admin_member.user, schedule=schedule)
        assert (schedule.state, schedule.next_run_at) == ("active", utc(2026, 5, 4, 12))
        assert schedules_run_due() == CronRun()
        clock.move_to(utc(2026, 5, 4, 12, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)

    assert len(runs_of(schedule)) == 1


def test_a_schedule_expires_at_end_at_and_fires_no_more(make_schedule):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(end_at=utc(2026, 5, 4, 11, 30))
        clock.move_to(utc(2026, 5, 4, 10, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        clock.move_to(utc(2026, 5, 4, 11, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        clock.move_to(utc(2026, 5, 4, 11, 29))
        assert schedules_run_due() == CronRun()
        schedule.refresh_from_db()
        assert schedule.state == "active"

        clock.move_to(utc(2026, 5, 4, 11, 30))
        assert schedules_run_due() == CronRun(expired=1)
        clock.move_to(utc(2026, 5, 4, 14))
        assert schedules_run_due() == CronRun()

    schedule.refresh_from_db()
    assert (schedule.state, schedule.next_run_at) == ("expired", None)
    assert len(runs_of(schedule)) == 2


def test_an_occurrence_at_end_at_does_not_fire_even_after_downtime(make_schedule):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(end_at=utc(2026, 5, 4, 11), catch_up="once")
        clock.move_to(utc(2026, 5, 4, 10, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        clock.move_to(utc(2026, 5, 4, 12))  # down over 11:00, which is end_at itself

        assert schedules_run_due() == CronRun(expired=1)

    schedule.refresh_from_db()
    assert schedule.state == "expired"
    assert len(runs_of(schedule)) == 1


def test_a_paused_schedule_expires_too(make_schedule, admin_member):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(end_at=utc(2026, 5, 4, 12))
        schedule_pause(principal=admin_member.user, schedule=schedule)
        clock.move_to(utc(2026, 5, 4, 12, 0, 1))

        assert schedules_run_due() == CronRun(expired=1)

    schedule.refresh_from_db()
    assert schedule.state == "expired"
    assert runs_of(schedule) == []


def test_changing_an_expired_schedule_plans_no_run_and_it_stays_expired(
    make_schedule, admin_member
):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(end_at=utc(2026, 5, 4, 9, 45))
        clock.move_to(utc(2026, 5, 4, 9, 50))
        assert schedules_run_due() == CronRun(expired=1)

        changed = schedule_update(
            principal=admin_member.user, schedule=schedule, end_at=utc(2026, 5, 5)
        )
        assert (changed.state, changed.next_run_at) == ("expired", None)
        with pytest.raises(ValidationError) as refused:
            schedule_update(principal=admin_member.user, schedule=schedule, cron="61 * * * *")
        assert list(refused.value.message_dict) == ["cron"]
        clock.move_to(utc(2026, 5, 4, 12, 0, 5))
        assert schedules_run_due() == CronRun()

    schedule.refresh_from_db()
    assert (schedule.state, schedule.next_run_at) == ("expired", None)
    assert runs_of(schedule) == []


def test_a_schedule_does_not_fire_before_start_at(make_schedule):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(start_at=utc(2026, 5, 4, 12, 10))
        assert schedule.next_run_at == utc(2026, 5, 4, 13)
        for moment in (utc(2026, 5, 4, 10, 0, 5), utc(2026, 5, 4, 12, 0, 5)):
            clock.move_to(moment)
            assert schedules_run_due() == CronRun()
        clock.move_to(utc(2026, 5, 4, 13, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)

    assert len(runs_of(schedule)) == 1


def test_a_schedule_whose_start_at_is_a_run_time_fires_at_start_at(make_schedule, admin_member):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule(start_at=utc(2026, 5, 4, 12))
        assert schedule.next_run_at == utc(2026, 5, 4, 12)
        clock.move_to(utc(2026, 5, 4, 12, 0, 5))
        assert schedules_run_due() == CronRun(fired=1)
        schedule.refresh_from_db()
        assert schedule.next_run_at == utc(2026, 5, 4, 13)

        # Pausing and resuming before start_at plans start_at again, as creating does.
        paused = make_schedule(name="later", start_at=utc(2026, 5, 5, 6))
        clock.move_to(utc(2026, 5, 4, 20))
        schedule_pause(principal=admin_member.user, schedule=paused)
        resumed = schedule_resume(principal=admin_member.user, schedule=paused)
        assert resumed.next_run_at == utc(2026, 5, 5, 6)

    assert len(runs_of(schedule)) == 1


def test_a_schedule_saved_without_a_planned_run_is_planned_from_start_at_not_fired(
    customer, template
):
    # As the admin form saves it: next_run_at is left for the scheduler to plan.
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False):
        schedule = Schedule.objects.create(
            customer=customer,
            name="from the admin",
            template=template,
            payload={"url": "s3://in/a.mp4"},
            cron="0 * * * *",
            start_at=utc(2026, 5, 4, 12),
        )

        assert schedules_run_due() == CronRun(planned=1)

    schedule.refresh_from_db()
    assert schedule.next_run_at == utc(2026, 5, 4, 12)  # start_at itself is a run time
    assert runs_of(schedule) == []


def test_a_run_the_template_refuses_is_skipped_and_the_schedule_moves_on(
    make_schedule, customer, caplog
):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        schedule = make_schedule()
        customer.is_active = False
        customer.save(update_fields=["is_active"])
        clock.move_to(utc(2026, 5, 4, 10, 0, 5))

        assert schedules_run_due() == CronRun(skipped=1)

    assert runs_of(schedule) == []
    schedule.refresh_from_db()
    assert (schedule.state, schedule.next_run_at, schedule.last_run_at) == (
        "active",
        utc(2026, 5, 4, 11),
        None,
    )
    assert "is not active" in caplog.text


def test_due_schedules_fire_in_next_run_order_each_once(make_schedule):
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        hourly = make_schedule(name="hourly")
        quarterly = make_schedule(name="quarterly", cron="*/15 * * * *")
        clock.move_to(utc(2026, 5, 4, 10, 0, 5))

        assert schedules_run_due() == CronRun(fired=2)

    assert len(runs_of(hourly)) == len(runs_of(quarterly)) == 1
    hourly.refresh_from_db()
    quarterly.refresh_from_db()
    assert (hourly.next_run_at, quarterly.next_run_at) == (
        utc(2026, 5, 4, 11),
        utc(2026, 5, 4, 10, 15),
    )
    assert hourly.last_run_at == quarterly.last_run_at == utc(2026, 5, 4, 10, 0, 5)
