"""Actions on a set of agendas (docs/design.md §7.4): abort, pause, resume or rerun everything
a filter matches, or a list of ids, as a job worked through in batches.

- `agenda_action_selection`: check what was asked (a filter with the agenda list's fields, or
  ids) — a bad one is a `ValidationError` keyed `filter.<field>` or `ids`.
- `agenda_action_preview`: the dry run — how many agendas match, how many the action would
  change; nothing is written.
- `agenda_action_start`: record the job and nudge a runner once it commits.
- `agenda_action_jobs_run`: the runner (the nudge, and the `pop-actions` timed process, which
  picks up a job whose runner died). Each batch is one transaction: it locks the job row
  (SKIP LOCKED: one runner per job), re-applies the selection above the job's cursor, locks
  those agendas' progress rows in id order, and passes each agenda through the service a single
  action uses (`agendas.services`), so the state machine decides for every agenda as it is
  now. A second job over the same set finds nothing left to change.

A job acts with its requester's rights, re-read for every batch: staff act on every agenda, a
customer's member on the agendas of the customers where they may submit.
"""

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import OperationalError, transaction
from django.db.models import Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from agendas.action_models import AgendaActionJob
from agendas.agenda_filters import AgendaFilter
from agendas.models import Agenda, AgendaProgress
from agendas.services import (
    PauseMode,
    RerunMode,
    agenda_abort,
    agenda_pause,
    agenda_rerun,
    agenda_resume,
)
from agendas.states import progresses_leave_waiting
from audit.context import principal_bound
from audit.services import audit_record_bulk
from core.after_commit import after_commit
from core.errors import InvalidTransition
from core.principals import Principal, principal_is_staff
from resourcepools.selectors import Role, customer_ids_with_role

logger = logging.getLogger("pop.agendas")

Action = AgendaActionJob.Action
S = AgendaProgress.State
FINAL = (S.SUCCEEDED, S.FAILED, S.ABORTED)

BATCH_SIZE = 100
MAX_IDS = 10_000
# A runner gives a job up to this long, then lets the next period go on (other jobs, other
# runners); a job with no batch for this long is taken over by the timed process.
RUN_SECONDS = 20.0
STALE_AFTER = timedelta(seconds=60)
# The filter fields an action takes: the agenda list's, with the same meanings.
FILTER_FIELDS: frozenset[str] = frozenset(AgendaFilter.base_filters)
RERUN_MODES = (RerunMode.CONTINUE, RerunMode.RESET_ALL)


def _would_change(action: str, mode: str = "") -> Q:
    """The progress rows `action` changes (the rest are skipped, with their state as reason)."""
    executing = Q(progress__state=S.EXECUTING)
    paused_flag = "progress__pause_now" if mode == PauseMode.NOW else "progress__pause_requested"
    return {
        Action.ABORT: ~Q(progress__state__in=FINAL)
        & ~(executing & Q(progress__abort_requested=True)),
        Action.PAUSE: Q(progress__state__in=(S.PENDING, S.READY, S.QUEUED))
        | (executing & Q(**{paused_flag: False})),
        Action.RESUME: Q(progress__state=S.PAUSED)
        | (executing & Q(progress__pause_requested=True)),
        Action.RERUN: Q(progress__state__in=(*FINAL, S.PAUSED))
        | Q(progress__state=S.PENDING, progress__do_not_run=True),
    }[action]


def _skip_reason(action: str, progress: AgendaProgress) -> str:
    if progress.state == S.EXECUTING and action == Action.ABORT:
        return "abort already requested"
    if progress.state == S.EXECUTING and action == Action.PAUSE:
        return "pause already requested"
    return f"{progress.state}: cannot {action}"


def agenda_action_selection(
    *, filter: dict | None = None, ids: list | None = None
) -> dict[str, Any]:
    """The selection a job re-applies: `{"filter": {...}}` or `{"ids": [...]}`, checked."""
    if (filter is None) == (ids is None):
        raise ValidationError({"filter": ["Give either a filter or ids, not both or neither."]})
    if ids is not None:
        if not ids:
            raise ValidationError({"ids": ["Give at least one agenda id."]})
        if len(ids) > MAX_IDS:
            raise ValidationError({"ids": [f"At most {MAX_IDS} ids; use a filter for more."]})
        return {"ids": sorted({str(agenda_id) for agenda_id in ids})}
    unknown = sorted(set(filter) - FILTER_FIELDS)
    if unknown:
        known = ", ".join(sorted(FILTER_FIELDS))
        raise ValidationError(
            {f"filter.{key}": [f"Unknown filter; known: {known}."] for key in unknown}
        )
    if not any(value not in (None, "", []) for value in filter.values()):
        raise ValidationError(
            {"filter": ["Give at least one filter (an empty one would act on every agenda)."]}
        )
    checked = AgendaFilter(data=_query(filter), queryset=Agenda.objects.none())
    if not checked.is_valid():
        raise ValidationError(
            {
                f"filter.{key}": [str(m) for m in messages]
                for key, messages in checked.errors.items()
            }
        )
    return {"filter": filter}


def _query(filter: dict) -> QueryDict:
    query = QueryDict(mutable=True)
    for key, value in filter.items():
        values = value if isinstance(value, list) else [value]
        query.setlist(
            key, ["true" if v is True else "false" if v is False else str(v) for v in values]
        )
    return query


def _actable(principal: Principal) -> QuerySet[Agenda]:
    """The agendas `principal` may act on: all for staff, else those of the customers where they
    may submit (a viewer's agendas are visible but never matched)."""
    agendas = Agenda.objects.all()
    if principal_is_staff(principal):
        return agendas
    return agendas.filter(customer_id__in=customer_ids_with_role(principal, Role.SUBMITTER))


def _selected(principal: Principal, selection: dict) -> QuerySet[Agenda]:
    agendas = _actable(principal)
    if "ids" in selection:
        return agendas.filter(pk__in=selection["ids"])
    return AgendaFilter(data=_query(selection["filter"]), queryset=agendas).qs


def _mode_checked(action: str, mode: str) -> str:
    if action == Action.RERUN:
        mode = mode or RerunMode.CONTINUE
        if mode not in RERUN_MODES:
            raise ValidationError(
                {"mode": [f"A rerun of a set takes mode {' or '.join(RERUN_MODES)}."]}
            )
        return mode
    if action == Action.PAUSE and mode in ("", PauseMode.AFTER_RUNNING, PauseMode.NOW):
        return mode if mode == PauseMode.NOW else ""
    if mode:
        raise ValidationError({"mode": [f"{action} takes no mode."]})
    return ""


@dataclass(frozen=True)
class Preview:
    matched: int
    would_change: int


def agenda_action_preview(
    *, principal: Principal, action: str, selection: dict, mode: str = ""
) -> Preview:
    """The dry run: how many agendas the selection matches now, how many `action` would change."""
    mode = _mode_checked(action, mode)
    agendas = _selected(principal, selection).order_by()
    return Preview(
        matched=agendas.count(), would_change=agendas.filter(_would_change(action, mode)).count()
    )


@transaction.atomic
def agenda_action_start(
    *, principal: Principal, action: str, selection: dict, mode: str = ""
) -> AgendaActionJob:
    """Record the job (`matched` counted now) and nudge a runner once it commits."""
    if not getattr(principal, "is_authenticated", False):
        raise PermissionDenied("Actions on a set need a signed-in user.")
    mode = _mode_checked(action, mode)
    job = AgendaActionJob.objects.create(
        requested_by=principal,
        action=action,
        mode=mode,
        selection=selection,
        matched=_selected(principal, selection).order_by().count(),
    )
    after_commit(_nudge, str(job.pk))
    return job


def _nudge(job_id: str) -> None:
    from django_q.tasks import async_task

    async_task(settings.POP_ACTIONS_TASK, job_id, group="pop-actions", save=False)


# Abort and pause, set-based: (the waiting agendas' target, its message, the executing ones' flag).
_STOPS: dict[str, tuple[str, str, str]] = {
    Action.ABORT: (S.ABORTED, "aborted by user", "abort_requested"),
    Action.PAUSE: (S.PAUSED, "paused by user", "pause_requested"),
}


def _stop(
    job: AgendaActionJob, principal: Principal, progresses: list[AgendaProgress], *, now: Any
) -> int:
    """Abort or pause a batch as the single services would, in a few statements: waiting
    agendas leave through the state machine's set form, executing ones are flagged for their
    worker (it stops, or pauses, at its next report). One audit event per customer."""
    target, message, flag = _STOPS[job.action]
    executing = [progress.pk for progress in progresses if progress.state == S.EXECUTING]
    flags = {flag: True, "updated_at": now}
    if job.mode == PauseMode.NOW:
        flags["pause_now"] = True
    AgendaProgress.objects.filter(pk__in=executing).update(**flags)
    progresses_leave_waiting(
        [progress for progress in progresses if progress.state != S.EXECUTING],
        target,
        message=message,
        now=now,
    )
    audit_record_bulk(
        action=f"agenda.{job.action}",
        targets=[progress.agenda for progress in progresses],
        detail={"job": str(job.pk)},
        principal=principal,
    )
    return len(progresses)


_APPLY: dict[str, Callable[..., AgendaProgress]] = {
    Action.ABORT: lambda principal, agenda, mode: agenda_abort(principal=principal, agenda=agenda),
    Action.PAUSE: lambda principal, agenda, mode: agenda_pause(
        principal=principal, agenda=agenda, mode=mode or PauseMode.AFTER_RUNNING
    ),
    Action.RESUME: lambda principal, agenda, mode: agenda_resume(
        principal=principal, agenda=agenda
    ),
    Action.RERUN: lambda principal, agenda, mode: agenda_rerun(
        principal=principal, agenda=agenda, mode=mode
    ),
}


def agenda_action_jobs_run(*, job_id: object = None, seconds: float = RUN_SECONDS) -> int:
    """Work through running jobs (one, or every one due) for up to `seconds`; the batches done."""
    deadline = time.monotonic() + seconds
    batches = 0
    jobs = AgendaActionJob.objects.filter(status=AgendaActionJob.Status.RUNNING)
    if job_id is not None:
        jobs = jobs.filter(pk=job_id)
    else:
        # Jobs nobody is working on: their runner died, or was never nudged.
        jobs = jobs.filter(updated_at__lt=timezone.now() - STALE_AFTER)
    for pk in list(jobs.order_by("created_at").values_list("pk", flat=True)[:20]):
        while time.monotonic() < deadline:
            outcome = _batch_run_retrying(pk)
            if outcome is None:  # done, gone, or another runner holds it
                break
            batches += 1
    return batches


def agenda_action_job_running(job_id: object) -> bool:
    return AgendaActionJob.objects.filter(pk=job_id, status=AgendaActionJob.Status.RUNNING).exists()


def _batch_run_retrying(job_id: object, attempts: int = 3) -> bool | None:
    for attempt in range(1, attempts + 1):
        try:
            return _batch_run(job_id)
        except OperationalError as error:  # a deadlock with a fill or a report: run it again
            if attempt == attempts:
                raise
            logger.warning("action job %s batch rolled back (%s); retrying", job_id, error)
            time.sleep(0.05 * attempt)
    return None


@transaction.atomic
def _batch_run(job_id: object) -> bool | None:
    """One batch of a job; True when there may be more, None when the job is done (or not ours)."""
    job = (
        AgendaActionJob.objects.select_for_update(skip_locked=True)
        .filter(pk=job_id, status=AgendaActionJob.Status.RUNNING)
        .first()
    )
    if job is None:
        return None
    now = timezone.now()
    principal = get_user_model().objects.filter(pk=job.requested_by_id, is_active=True).first()
    if principal is None:
        return _job_end(job, now, error="The requesting user is gone or inactive.")
    agendas = _selected(principal, job.selection)
    if job.cursor is not None:
        agendas = agendas.filter(pk__gt=job.cursor)
    ids = list(agendas.order_by("pk").values_list("pk", flat=True)[:BATCH_SIZE])
    if not ids:
        return _job_end(job, now)
    # Lock the batch's progress rows in id order (a fixed order between concurrent batches),
    # then decide on the rows as they are now.
    progresses = {
        progress.agenda_id: progress
        for progress in AgendaProgress.objects.select_for_update()
        .filter(agenda_id__in=ids)
        .order_by("agenda_id")
    }
    changeable = set(
        Agenda.objects.filter(pk__in=ids)
        .filter(_would_change(job.action, job.mode))
        .values_list("pk", flat=True)
    )
    agendas_by_id = Agenda.objects.select_related("customer").in_bulk(ids)
    skipped: Counter[str] = Counter(job.skipped)
    todo = []
    for agenda_id in ids:
        progress = progresses[agenda_id]
        progress.agenda = agendas_by_id[agenda_id]
        if agenda_id in changeable:
            todo.append(progress)
        else:
            skipped[_skip_reason(job.action, progress)] += 1
    with principal_bound(principal):
        if job.action in _STOPS:
            job.changed += _stop(job, principal, todo, now=now)
        else:
            for progress in todo:
                try:
                    _APPLY[job.action](principal, progress.agenda, job.mode)
                except (InvalidTransition, PermissionDenied, ValidationError) as error:
                    skipped[_refusal_reason(job.action, error)] += 1
                else:
                    job.changed += 1
    job.processed += len(ids)
    job.skipped = dict(skipped)
    job.cursor = ids[-1]
    job.save(update_fields=["processed", "changed", "skipped", "cursor", "updated_at"])
    return True


def _refusal_reason(action: str, error: Exception) -> str:
    if isinstance(error, InvalidTransition):
        return f"{error.current_state}: cannot {action}"
    if isinstance(error, PermissionDenied):
        return "not allowed"
    return "refused"


def _job_end(job: AgendaActionJob, now: Any, *, error: str = "") -> None:
    job.status = AgendaActionJob.Status.FAILED if error else AgendaActionJob.Status.DONE
    job.error = error
    job.finished_at = now
    job.save(update_fields=["status", "error", "finished_at", "updated_at"])
    return None
