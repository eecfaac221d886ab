"""The `cron` timed process: run due schedules, expire ended ones (docs/design.md §3 `Schedule`,
§7).

Schedule writes made by people (create, pause, resume, trigger) live in
scheduling/schedule_services.py; this module is what the scheduler does on its own.

Exactly once: each due schedule is claimed in its own short transaction, its row locked with
FOR UPDATE SKIP LOCKED and its `next_run_at` moved on by a conditional UPDATE before the
agenda is submitted in that same transaction. A second cluster skips the locked row, or sees
the moved `next_run_at` once the first commits, so an occurrence yields at most one agenda
(and the conditional UPDATE keeps that true on SQLite, which has no row locks).
"""

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agendas.template_services import template_is_usable_by, template_run
from core.principals import SYSTEM
from scheduling import cron
from scheduling.models import Schedule
from scheduling.schedule_services import schedule_has_unfinished_run

logger = logging.getLogger("pop.scheduling.cron")
State = Schedule.State


class ScheduleClaimLost(Exception):
    """Another scheduler moved the schedule on between our lock and our write (SQLite only)."""


@dataclass(frozen=True)
class CronRun:
    """What one pass did: agendas created, runs skipped, schedules planned and expired."""

    fired: int = 0
    skipped: int = 0
    planned: int = 0
    expired: int = 0
    failed: int = 0


def misfire_grace() -> timedelta:
    """How late an occurrence may be picked up and still count as on time, not missed."""
    interval = float(getattr(settings, "POP_CRON_INTERVAL", 10.0))
    seconds = getattr(settings, "POP_CRON_MISFIRE_GRACE_SECONDS", None)
    return timedelta(seconds=float(seconds) if seconds is not None else max(60.0, 3 * interval))


def schedules_run_due(*, now: datetime | None = None, limit: int = 1000) -> CronRun:
    """Fire every due active schedule once, then expire schedules past `end_at`.

    One short transaction per schedule (row locked with SKIP LOCKED). A schedule whose run
    cannot be submitted (template no longer shared, payload refused, customer inactive) skips
    that occurrence with a warning and moves on to the next one.
    """
    now = now or timezone.now()
    totals = {"fired": 0, "skipped": 0, "planned": 0, "expired": 0, "failed": 0}
    passed: list[object] = []
    for _ in range(limit):
        try:
            with transaction.atomic():
                schedule = _lock_next_due(now=now, exclude=passed)
                if schedule is None:
                    break
                passed.append(schedule.pk)
                outcome = _schedule_run(schedule, now=now)
        except ScheduleClaimLost:
            continue
        except Exception:  # the process's outermost loop: one broken schedule must not stop all
            logger.exception("cron: schedule %s failed", passed[-1] if passed else "?")
            totals["failed"] += 1
            continue
        totals[outcome] += 1
    totals["expired"] += schedules_expire(now=now)
    return CronRun(**totals)


def schedules_expire(*, now: datetime | None = None) -> int:
    """Mark active and paused schedules whose `end_at` has passed as expired; return the count."""
    now = now or timezone.now()
    expired = Schedule.objects.filter(
        state__in=[State.ACTIVE, State.PAUSED], end_at__isnull=False, end_at__lte=now
    ).update(state=State.EXPIRED, next_run_at=None, updated_at=now)
    if expired:
        logger.info("cron: %d schedule(s) expired", expired)
    return expired


def _lock_next_due(*, now: datetime, exclude: list[object]) -> Schedule | None:
    locked = (
        Schedule.objects.select_for_update(skip_locked=True)
        .filter(state=State.ACTIVE)
        .filter(Q(next_run_at__lte=now) | Q(next_run_at__isnull=True))
        .exclude(pk__in=exclude)
        .order_by("next_run_at", "pk")
        .first()
    )
    if locked is None:
        return None
    # Related rows are read after the lock, so FOR UPDATE never reaches template or customer.
    return Schedule.objects.select_related("customer", "template").get(pk=locked.pk)


def _schedule_run(schedule: Schedule, *, now: datetime) -> str:
    """Handle one locked schedule; returns which CronRun counter it adds to."""
    occurrence = schedule.next_run_at
    if occurrence is None:
        # Created without planning (e.g. in the admin): plan from now, fire nothing yet.
        _move_on(schedule, None, next_run_at=_next_after(schedule, now), now=now)
        return "planned"
    if schedule.end_at is not None and occurrence >= schedule.end_at:
        Schedule.objects.filter(pk=schedule.pk, state=State.ACTIVE).update(
            state=State.EXPIRED, next_run_at=None, updated_at=now
        )
        return "expired"
    window_start = max(occurrence, now - misfire_grace())
    on_time = cron.next_run(schedule.cron, schedule.timezone, window_start - timedelta.resolution)
    is_on_time = on_time <= now and (schedule.end_at is None or on_time < schedule.end_at)
    missed = occurrence < window_start
    _move_on(schedule, occurrence, next_run_at=_next_after(schedule, now), now=now)
    if not is_on_time and not (missed and schedule.catch_up == Schedule.CatchUp.ONCE):
        logger.info(
            "cron: schedule %s missed runs since %s; catch_up=skip",
            schedule.pk,
            occurrence.isoformat(),
        )
        return "skipped"
    if schedule.overlap == Schedule.Overlap.SKIP and schedule_has_unfinished_run(schedule):
        logger.info(
            "cron: schedule %s skipped a run: the previous one is not finished", schedule.pk
        )
        return "skipped"
    fired = _submit_run(schedule, occurrence=occurrence)
    if fired:
        Schedule.objects.filter(pk=schedule.pk).update(last_run_at=now)
        return "fired"
    return "skipped"


def _next_after(schedule: Schedule, moment: datetime) -> datetime:
    """The first run time after `moment`, and not before `start_at` (which may be one)."""
    return cron.next_run(schedule.cron, schedule.timezone, moment, not_before=schedule.start_at)


def _move_on(
    schedule: Schedule, occurrence: datetime | None, *, next_run_at: datetime, now: datetime
) -> None:
    # The conditional write is the claim: on SQLite (no FOR UPDATE) a rival that read the
    # same occurrence updates nothing and rolls back instead of submitting a second agenda.
    moved = Schedule.objects.filter(
        pk=schedule.pk, state=State.ACTIVE, next_run_at=occurrence
    ).update(next_run_at=next_run_at, updated_at=now)
    if moved != 1:
        raise ScheduleClaimLost(str(schedule.pk))
    schedule.next_run_at = next_run_at


def _submit_run(schedule: Schedule, *, occurrence: datetime) -> bool:
    """Submit the schedule's template for `occurrence`; False (logged) when it is refused."""
    if not template_is_usable_by(schedule.template, schedule.customer):
        logger.warning(
            "cron: schedule %s skipped a run: template %s is no longer shared with %s",
            schedule.pk,
            schedule.template_id,
            schedule.customer.slug,
        )
        return False
    try:
        with transaction.atomic():
            template_run(
                principal=SYSTEM,
                template=schedule.template,
                payload=schedule.payload,
                customer=schedule.customer,
                schedule=schedule,
                # Pinned: that version; empty: the latest at this run (docs/design.md §5.3).
                version=schedule.template_version,
                cid=uuid.uuid4().hex,
                link_id=schedule.link_id or None,
                # One agenda per occurrence, even if two schedulers ever got this far.
                idempotency_key=f"pop-schedule:{schedule.pk}:{occurrence.isoformat()}",
            )
    except (ValidationError, PermissionDenied) as error:
        logger.warning("cron: schedule %s skipped a run: %s", schedule.pk, error)
        return False
    return True
