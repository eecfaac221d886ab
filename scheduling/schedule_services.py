"""Cron schedule writes: create, change, pause, resume, trigger (docs/design.md §3 `Schedule`, §7
cron).

Each public function checks the caller's role first and runs in one transaction. The timed
`cron` process that runs due schedules is scheduling/cron_services.py; the cron arithmetic
both use is scheduling/cron.py.
"""

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agendas.models import Agenda, AgendaTemplate
from agendas.states import TERMINAL, InvalidTransition
from agendas.template_services import template_expand, template_is_usable_by, template_run
from audit.services import audit_record
from resourcepools.models import Customer, Membership
from resourcepools.selectors import Principal, require_role
from resourcepools.services import acting_customer
from scheduling import cron
from scheduling.models import Schedule

Role = Membership.Role
State = Schedule.State


def schedule_next_run(
    *,
    cron_expression: str,
    zone_name: str,
    after: datetime,
    not_before: datetime | None = None,
) -> datetime:
    """The first time after `after`, and at or after `not_before`, the expression fires in its
    zone (aware, UTC).

    Raises ValidationError naming `cron` and/or `timezone` when either is unusable.
    """
    errors = {
        field: messages
        for field, messages in (
            ("cron", cron.cron_errors(cron_expression)),
            ("timezone", cron.timezone_errors(zone_name)),
        )
        if messages
    }
    if errors:
        raise ValidationError(errors)
    try:
        return cron.next_run(cron_expression, zone_name, after, not_before=not_before)
    except cron.CronError as error:  # no run before datetime's end, year 9999
        field = "start_at" if not_before is not None and not_before > after else "cron"
        raise ValidationError({field: [str(error)]}) from error


# Python's datetimes end with year 9999, and the cron arithmetic looks ahead of start_at and
# end_at: moments that late are input errors (400), never an OverflowError (500).
LAST_YEAR = 8999


def _check(schedule: Schedule) -> None:
    errors: dict[str, list[str]] = {
        field: [f"Must be in the year {LAST_YEAR} or earlier."]
        for field in ("start_at", "end_at")
        if getattr(schedule, field) is not None and getattr(schedule, field).year > LAST_YEAR
    }
    if schedule.start_at and schedule.end_at and schedule.end_at <= schedule.start_at:
        errors["end_at"] = ["Must be after start_at."]
    if not template_is_usable_by(schedule.template, schedule.customer):
        errors["template"] = [
            f"Template {schedule.template.name} is not shared with {schedule.customer.slug}."
        ]
    if errors:
        raise ValidationError(errors)
    # A payload the template refuses would fail on every run: refuse it now (400 `payload.*`),
    # checked against the pinned version, or the latest one a follower runs today. A pinned
    # number the template lacks is a 400 naming `template_version`.
    template_expand(
        template=schedule.template,
        payload=schedule.payload,
        version=schedule.template_version,
        field="template_version",
    )


def _plan(schedule: Schedule, now: datetime) -> None:
    # start_at is inclusive, as in the cron pass (cron_services._next_after). Computed even
    # for an expired schedule: that checks the cron expression and the zone.
    next_run_at = schedule_next_run(
        cron_expression=schedule.cron,
        zone_name=schedule.timezone,
        after=now,
        not_before=schedule.start_at,
    )
    # Expired is final (cron_services.schedules_expire): it has no next run to show.
    schedule.next_run_at = None if schedule.state == State.EXPIRED else next_run_at


def schedule_validate(schedule: Schedule) -> None:
    """Check a schedule and plan its next run (set on it, nothing written): ValidationError by
    field for end before start, a template not shared with the customer, a pinned template
    version it lacks, a payload the template refuses, an unusable cron expression or time
    zone. Every write of a schedule's
    definition goes through it; the admin form checks with it."""
    _check(schedule)
    _plan(schedule, timezone.now())


def _save(schedule: Schedule, update_fields: list[str] | None) -> None:
    try:
        with transaction.atomic():
            schedule.save(update_fields=update_fields)
    except IntegrityError as error:
        raise ValidationError({"name": ["This customer has a schedule of that name."]}) from error


@transaction.atomic
def schedule_create(
    *,
    principal: Principal,
    template: AgendaTemplate,
    customer: Customer | None = None,
    cid: str = "",
    **fields: Any,
) -> Schedule:
    """Create an active schedule (default: of the customer the caller administers)."""
    customer = acting_customer(principal=principal, customer=customer, role=Role.ADMIN)
    require_role(principal, customer.pk, Role.ADMIN)
    schedule = Schedule(customer=customer, template=template, cid=cid, **fields)
    schedule_validate(schedule)
    _save(schedule, None)
    audit_record(action="schedule.create", target=schedule, detail={"name": schedule.name})
    return schedule


@transaction.atomic
def schedule_update(*, principal: Principal, schedule: Schedule, **fields: Any) -> Schedule:
    """Change a schedule (its customer's admin); replans the next run."""
    require_role(principal, schedule.customer_id, Role.ADMIN)
    fields.pop("customer", None)
    schedule = (
        Schedule.objects.select_for_update(of=("self",))
        .select_related("customer")
        .get(pk=schedule.pk)
    )
    for name, value in fields.items():
        setattr(schedule, name, value)
    schedule_validate(schedule)
    _save(schedule, [*fields, "next_run_at", "updated_at"])
    audit_record(action="schedule.update", target=schedule, detail={"fields": sorted(fields)})
    return schedule


@transaction.atomic
def schedule_save_checked(schedule: Schedule) -> Schedule:
    """Save a schedule a trusted caller (the admin) created or changed: checked, and its next
    run planned afresh from its cron, zone and start, as `schedule_update` does."""
    schedule_validate(schedule)
    _save(schedule, None)
    return schedule


@transaction.atomic
def schedule_delete(*, principal: Principal, schedule: Schedule) -> None:
    """Delete a schedule (its customer's admin); its agendas stay."""
    require_role(principal, schedule.customer_id, Role.ADMIN)
    audit_record(action="schedule.delete", target=schedule, detail={"name": schedule.name})
    schedule.delete()


def _locked(schedule: Schedule) -> Schedule:
    return (
        Schedule.objects.select_for_update(of=("self",))
        .select_related("customer")
        .get(pk=schedule.pk)
    )


@transaction.atomic
def schedule_pause(*, principal: Principal, schedule: Schedule) -> Schedule:
    """Pause an active schedule (its customer's admin); locks the schedule row."""
    require_role(principal, schedule.customer_id, Role.ADMIN)
    schedule = _locked(schedule)
    if schedule.state != State.ACTIVE:
        raise InvalidTransition(
            f"Schedule {schedule.name} is {schedule.state}; only an active one can be paused.",
            current_state=schedule.state,
        )
    Schedule.objects.filter(pk=schedule.pk).update(state=State.PAUSED, updated_at=timezone.now())
    schedule.refresh_from_db()
    audit_record(action="schedule.pause", target=schedule)
    return schedule


@transaction.atomic
def schedule_resume(*, principal: Principal, schedule: Schedule) -> Schedule:
    """Resume a paused schedule from now on (its customer's admin); locks the schedule row."""
    require_role(principal, schedule.customer_id, Role.ADMIN)
    schedule = _locked(schedule)
    if schedule.state != State.PAUSED:
        raise InvalidTransition(
            f"Schedule {schedule.name} is {schedule.state}; only a paused one can be resumed.",
            current_state=schedule.state,
        )
    now = timezone.now()
    if schedule.end_at is not None and schedule.end_at <= now:
        # Active with nothing left to run would only wait for the cron pass to expire it.
        raise InvalidTransition(
            f"Schedule {schedule.name} ended at {schedule.end_at.isoformat()}; move its end_at "
            "to resume it.",
            current_state=schedule.state,
        )
    _plan(schedule, now)
    Schedule.objects.filter(pk=schedule.pk).update(
        state=State.ACTIVE, next_run_at=schedule.next_run_at, updated_at=timezone.now()
    )
    schedule.refresh_from_db()
    audit_record(action="schedule.resume", target=schedule)
    return schedule


def schedule_has_unfinished_run(schedule: Schedule) -> bool:
    """Whether an agenda the schedule submitted has not reached a terminal state yet."""
    return (
        Agenda.objects.filter(schedule_id=schedule.pk)
        .exclude(progress__state__in=TERMINAL)
        .exists()
    )


@transaction.atomic
def schedule_trigger(*, principal: Principal, schedule: Schedule, cid: str = "") -> Agenda:
    """Run the schedule's template once now, outside its cron timing (submitter).

    Only an active schedule runs, and its `overlap=skip` holds for a run by hand as for one
    by cron: 409 naming the state when it is paused or expired, or while its previous run is
    unfinished. Locks the schedule row, so two triggers never both pass the overlap check.
    """
    require_role(principal, schedule.customer_id, Role.SUBMITTER)
    schedule = _locked(schedule)
    if schedule.state != State.ACTIVE:
        raise InvalidTransition(
            f"Schedule {schedule.name} is {schedule.state}; only an active one can be "
            "triggered (resume it first).",
            current_state=schedule.state,
        )
    if schedule.overlap == Schedule.Overlap.SKIP and schedule_has_unfinished_run(schedule):
        raise InvalidTransition(
            f"Schedule {schedule.name} skips overlapping runs and its previous run is not "
            "finished.",
            current_state=schedule.state,
        )
    agenda, _ = template_run(
        principal=principal,
        template=schedule.template,
        payload=schedule.payload,
        customer=schedule.customer,
        schedule=schedule,
        version=schedule.template_version,
        cid=cid,
        link_id=schedule.link_id or None,
    )
    Schedule.objects.filter(pk=schedule.pk).update(
        last_run_at=timezone.now(), updated_at=timezone.now()
    )
    audit_record(action="schedule.trigger", target=schedule, detail={"agenda": agenda.pk})
    return agenda
