"""The agenda state machine: the transition table, what entering a state writes (progress,
queue rows, the callback outbox, fill nudges), execution outcomes and the retry policy
(operation states: operations.py). Each function works inside the caller's transaction;
callers lock the progress row (`select_for_update`) before a single-row transition.
"""

import json
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agendas.fill_nudge import fill_nudge
from agendas.models import Agenda, AgendaProgress, AgendaWait, Execution, OperationProgress
from agendas.queue_models import QueuedAgenda, ReadyAgenda
from agendas.states.callback_outbox import callback_enqueue
from agendas.states.lanes import lanes_charge, lanes_refund, lanes_wake
from agendas.states.operations import OpState, operations_abort_unfinished
from core.after_commit import after_commit
from core.column_inserts import insert_columns, insert_instances
from core.errors import InvalidTransition
from core.rows import cache_reverse_one_way
from core.unsaved_instances import unsaved_instance

logger = logging.getLogger("pop.agendas")

S = AgendaProgress.State

TERMINAL: frozenset[str] = frozenset({S.SUCCEEDED, S.FAILED, S.ABORTED})
WAITING: frozenset[str] = frozenset({S.PENDING, S.READY, S.QUEUED, S.PAUSED})
NOTIFY: frozenset[str] = TERMINAL | {S.EXECUTING, S.PAUSED}
ALLOWED: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.READY, S.PAUSED, S.FAILED, S.ABORTED}),  # failed: see waits.py
    S.READY: frozenset({S.QUEUED, S.PAUSED, S.ABORTED}),
    S.QUEUED: frozenset({S.EXECUTING, S.READY, S.PAUSED, S.ABORTED}),
    S.EXECUTING: frozenset({S.SUCCEEDED, S.FAILED, S.PENDING, S.PAUSED, S.ABORTED}),
    S.PAUSED: frozenset({S.READY, S.PENDING, S.FAILED, S.ABORTED}),  # failed: see waits.py
    # Rerun: back to ready, or to pending with do_not_run when `skip_execution`.
    S.SUCCEEDED: frozenset({S.READY, S.PENDING}),
    S.FAILED: frozenset({S.READY, S.PENDING}),
    S.ABORTED: frozenset({S.READY, S.PENDING}),
}
# Run in the transaction as agendas enter a terminal state, with (their locked progress rows,
# that state, whether they left a waiting state, now): waits.py, built on this module,
# registers its release here.
FINISH_HOOKS: list[Callable[[list[AgendaProgress], str, bool, datetime], None]] = []


def processing_state(state: str) -> str:
    """The POP-compatible waiting/executing/complete triple for a state."""
    if state == S.EXECUTING:
        return "executing"
    return "complete" if state in TERMINAL else "waiting"


def check_transition(progress: AgendaProgress, target: str, *, action: str | None = None) -> None:
    """Raise InvalidTransition unless `progress` may move to `target`."""
    if target not in ALLOWED[progress.state]:
        verb = action or f"become {target}"
        raise InvalidTransition(
            f"Agenda {progress.agenda_id} is {progress.state}; cannot {verb}.",
            current_state=progress.state,
        )


def progress_create(
    *, agenda: Agenda, run_after: datetime | None, do_not_run: bool, now: datetime
) -> AgendaProgress:
    """Write the progress and operation rows of a new agenda, ready or pending (submit)."""
    progress = _new_progress(agenda, run_after=run_after, do_not_run=do_not_run, now=now)
    progress.save(force_insert=True)
    OperationProgress.objects.bulk_create(_new_operations(progress, agenda))
    if progress.state == S.READY:
        _enter_ready(progress, agenda=agenda, now=now)
    return progress


def progress_create_many(
    entries: Sequence[tuple[Agenda, datetime | None, bool]], *, now: datetime
) -> list[AgendaProgress]:
    """`progress_create` for many new (already inserted) agendas: one INSERT per table.

    `entries` are (agenda, run_after, do_not_run). Each progress is cached on its agenda
    (`agenda.progress`), one way: a progress does not cache its agenda, so the pair is freed
    with the request instead of by the cyclic collector (core/rows.py). Ready rows get
    `added_at` one microsecond apart in entry order, so the FIFO order within the batch is
    kept; one fill nudge covers every insight involved.
    """
    pairs = [
        (
            agenda,
            _new_progress(
                agenda, run_after=run_after, do_not_run=do_not_run, now=now, relate=False
            ),
        )
        for agenda, run_after, do_not_run in entries
    ]
    progresses = [progress for _, progress in pairs]
    insert_instances(AgendaProgress, progresses, now=now)
    # The operations and ready rows too: no instance per row (the callers never see them).
    operations: dict[str, list] = {}
    for agenda, progress in pairs:
        for values in _new_operation_values(progress, agenda):
            for attname, value in values.items():
                operations.setdefault(attname, []).append(value)
    insert_columns(OperationProgress, operations, now=now)
    ready = [agenda for agenda, progress in pairs if progress.state == S.READY]
    insert_columns(
        ReadyAgenda,
        {
            "agenda_id": [agenda.pk for agenda in ready],
            "insight_id": [agenda.insight_id for agenda in ready],
            "customer_id": [agenda.customer_id for agenda in ready],
            "priority": [agenda.priority for agenda in ready],
            "added_at": [now + timedelta(microseconds=index) for index in range(len(ready))],
        },
        now=now,
    )
    lanes_wake((agenda.insight_id, agenda.customer_id) for agenda in ready)
    fill_nudge(agenda.insight_id for agenda in ready)
    for agenda, progress in pairs:
        cache_reverse_one_way(agenda, "progress", progress)
    return progresses


def _new_progress(
    agenda: Agenda,
    *,
    run_after: datetime | None,
    do_not_run: bool,
    now: datetime,
    relate: bool = True,
) -> AgendaProgress:
    """A new agenda's progress row, unsaved: ready, or pending when held or not yet due
    (docs/design.md §4, submit). `relate=False` sets its agenda's key only (nothing cached
    either way)."""
    waiting = do_not_run or (run_after is not None and run_after > now)
    relation = {"agenda": agenda} if relate else {"agenda_id": agenda.pk}
    return unsaved_instance(
        AgendaProgress,
        **relation,
        customer_id=agenda.customer_id,
        link_id=agenda.link_id,
        cid=agenda.cid,
        state=S.PENDING if waiting else S.READY,
        message="do not run" if do_not_run else ("waiting for run_after" if waiting else ""),
        run_after=run_after,
        do_not_run=do_not_run,
    )


def _new_operations(progress: AgendaProgress, agenda: Agenda) -> list[OperationProgress]:
    return [OperationProgress(**values) for values in _new_operation_values(progress, agenda)]


def _new_operation_values(progress: AgendaProgress, agenda: Agenda) -> list[dict[str, object]]:
    """The fields of a new agenda's operation rows, one dict per operation, by attname."""
    return [
        {
            "agenda_progress_id": progress.pk,
            "customer_id": agenda.customer_id,
            "link_id": agenda.link_id,
            "cid": agenda.cid,
            "position": index,
            "name": operation["name"],
            "type": operation["type"],
            "state": OpState.WAITING,
        }
        for index, operation in enumerate(agenda.operations)
    ]


def transition(
    progress: AgendaProgress,
    target: str,
    *,
    message: str | None = None,
    action: str | None = None,
    now: datetime | None = None,
    extra_fields: Iterable[str] = (),
    queue_position: int | None = None,
) -> None:
    """Move a locked progress row to `target`, keeping queue rows and the outbox in step.

    `extra_fields` names other attributes the caller set on `progress` to save with it;
    `queue_position` places the agenda in its insight's queue when it becomes queued.
    """
    check_transition(progress, target, action=action)
    now = now or timezone.now()
    source = progress.state
    if target == S.READY and source in (S.PENDING, S.PAUSED) and _waits(progress.agenda_id):
        # Still waiting for other agendas: it enters ready when they finish (waits.py).
        if source == S.PENDING:
            progress.save(update_fields=sorted({"updated_at", *extra_fields}))
            return
        target = S.PENDING
    fields = {"state", "updated_at", *extra_fields}
    if source in (S.READY, S.QUEUED) and target != S.QUEUED:
        # Leaving the queues: a paused or aborted agenda must never be pulled (docs/design.md §6.3).
        ReadyAgenda.objects.filter(agenda_id=progress.agenda_id).delete()
        QueuedAgenda.objects.filter(agenda_id=progress.agenda_id).delete()
    if source == S.QUEUED and target != S.EXECUTING:
        # Charged when queued (fair share), never run: the charge is given back.
        lanes_refund(progress.agenda.insight_id, progress.customer_id, now=now)
    if target == S.QUEUED:
        _enter_queue(progress.agenda_id, position=queue_position, now=now)
    if target == S.READY:
        _enter_ready(progress, agenda=progress.agenda, now=now)
    fields |= _progress_enter(progress, target, message=message, now=now)
    progress.save(update_fields=sorted(fields))
    if target in NOTIFY:
        callback_enqueue(progress, event=target, now=now)
    if target in TERMINAL:
        _log_completed(progress, now=now)
        for hook in FINISH_HOOKS:
            hook([progress], target, source in WAITING, now)


def _waits(agenda_id: object) -> bool:  # an open wait for other agendas (waits.py)
    return AgendaWait.objects.filter(agenda_id=agenda_id, ended_at__isnull=True).exists()


class _Moment:
    """A marker in ENTRY for a time that is only known when the transition happens."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOW = _Moment("NOW")  # the transition's time
NOW_IF_UNSET = _Moment("NOW_IF_UNSET")  # the transition's time unless the field has one already
# The attempt an execution begins: one more than those completed (`attempts_started`).
NEXT_ATTEMPT = _Moment("NEXT_ATTEMPT")
_LEAVE_EXECUTION = {"current_execution": None}
# A finished agenda keeps no time to run after (a retry's backoff ends with the agenda).
_END = {
    "completed_at": NOW,
    "abort_requested": False,
    "pause_requested": False,
    "pause_now": False,
    "run_after": None,
}
# What entering each state writes on the progress row besides `state` (and `message` when
# given). The row path (`_progress_enter`), the set-based updates (`entry_update`) and the
# claim's SQL (`entry_sql`) all read it.
ENTRY: dict[str, dict[str, object]] = {
    S.PENDING: _LEAVE_EXECUTION,
    S.READY: {
        "abort_requested": False,
        "pause_requested": False,
        "pause_now": False,
        "completed_at": None,
        **_LEAVE_EXECUTION,
    },
    S.QUEUED: _LEAVE_EXECUTION,
    S.EXECUTING: {"started_at": NOW_IF_UNSET, "attempts_started": NEXT_ATTEMPT},
    S.PAUSED: {"pause_requested": False, "pause_now": False, **_LEAVE_EXECUTION},
    S.SUCCEEDED: {**_END, **_LEAVE_EXECUTION},
    S.FAILED: {**_END, **_LEAVE_EXECUTION},
    S.ABORTED: {**_END, **_LEAVE_EXECUTION},
}


def _progress_enter(
    progress: AgendaProgress, target: str, *, message: str | None, now: datetime
) -> set[str]:
    """The row-level part of entering `target` (no queue rows, no outbox, no save): set the
    state, message and what ENTRY lists; return the fields changed."""
    fields = {"state"}
    progress.state = target
    if message is not None:
        progress.message = message
        fields.add("message")
    for name, value in ENTRY[target].items():
        if value is NOW_IF_UNSET:
            if getattr(progress, name) is not None:
                continue
            value = now
        elif value is NOW:
            value = now
        elif value is NEXT_ATTEMPT:
            value = progress.attempts_completed + 1
        elif name == "current_execution" and progress.current_execution_id is None:
            continue  # already empty: no load, no write
        setattr(progress, name, value)
        fields.add(name)
    return fields


def entry_update(target: str, *, now: datetime) -> dict[str, object]:
    """Keyword arguments of `QuerySet.update()` that enter `target` (state included)."""
    values: dict[str, object] = {"state": target, "updated_at": now}
    for name, value in ENTRY[target].items():
        if value is NOW_IF_UNSET:
            value = Coalesce(name, Value(now))
        elif value is NOW:
            value = now
        elif value is NEXT_ATTEMPT:
            value = F("attempts_completed") + 1
        values[name] = value
    return values


def entry_sql(target: str, *, table: str, now_parameter: str) -> str:
    """The `SET` items (after `state`) that enter `target` in hand-written SQL on the progress
    table aliased `table`; the transition's time is the named parameter `now_parameter`."""
    items = []
    for name, value in ENTRY[target].items():
        column = AgendaProgress._meta.get_field(name).column
        now = f"%({now_parameter})s"
        if value is NOW_IF_UNSET:
            expression = f"coalesce({table}.{column}, {now})"
        elif value is NOW:
            expression = now
        elif value is NEXT_ATTEMPT:
            expression = (
                f"{table}.{AgendaProgress._meta.get_field('attempts_completed').column} + 1"
            )
        elif value is None:
            expression = "NULL"
        else:
            expression = "true" if value else "false"
        items.append(f"{column} = {expression}")
    return ", ".join(items)


def _log_completed(progress: AgendaProgress, *, now: datetime) -> None:
    # One structured line per completed agenda, written only if the transaction commits; not
    # even built when the logger would drop it (LOG_LEVEL above INFO).
    if not logger.isEnabledFor(logging.INFO):
        return
    agenda = progress.agenda
    line = json.dumps(
        {
            "event": "agenda_completed",
            "cid": agenda.cid,
            "agenda": str(agenda.pk),
            "link_id": agenda.link_id,
            "customer": agenda.customer.slug,
            "outcome": progress.state,
            "attempts": progress.attempts_completed,
            "elapsed": round((now - agenda.created_at).total_seconds(), 3),
        }
    )
    after_commit(logger.info, line)


def _enter_ready(progress: AgendaProgress, *, agenda: Agenda, now: datetime) -> None:
    ReadyAgenda.objects.create(
        agenda_id=agenda.pk,
        insight_id=agenda.insight_id,
        customer_id=agenda.customer_id,
        priority=agenda.priority,
        added_at=now,
    )
    lanes_wake([(agenda.insight_id, agenda.customer_id)])
    fill_nudge([agenda.insight_id])


def _enter_queue(agenda_id: object, *, position: int | None, now: datetime) -> None:
    ready = ReadyAgenda.objects.get(agenda_id=agenda_id)
    QueuedAgenda.objects.create(
        agenda_id=agenda_id,
        insight_id=ready.insight_id,
        customer_id=ready.customer_id,
        position=position if position is not None else int(now.timestamp() * 1_000_000),
        queued_at=now,
    )
    ready.delete()


# --- Execution outcomes and the retry policy (docs/design.md §4, §6.4, §8) ------------------------
Outcome = Execution.Outcome
# Outcomes that use up one of the agenda's `max_attempts`; a pause or an abort does not.
COUNTED_OUTCOMES: frozenset[str] = frozenset(
    {Outcome.SUCCEEDED, Outcome.FAILED, Outcome.RECLAIMED, Outcome.TIMED_OUT}
)
_jitter = random.Random()


def retry_delay(*, retry_delay_seconds: int, attempt: int, cap: float) -> float:
    """Backoff before retry `attempt` + 1: min(cap, delay × 2^(attempt−1)), jittered ±20%."""
    base = min(cap, retry_delay_seconds * 2 ** max(0, attempt - 1))
    return min(cap, base * _jitter.uniform(0.8, 1.2))


def diagnostic(message: str, *, code: str = "", detail: object = None, now: datetime) -> dict:
    """One diagnostics entry as docs/design.md §3 shapes them."""
    return {"time": now.isoformat(), "message": message, "code": code, "detail": detail}


def execution_end(
    progress: AgendaProgress,
    execution: Execution,
    outcome: str,
    *,
    now: datetime,
    message: str = "",
    diagnostics: list[dict] | None = None,
    progress_fields: Iterable[str] = (),
    execution_fields: Iterable[str] = (),
    retryable: bool = True,
) -> str:
    """End the locked current `execution` with `outcome` and move its agenda on; return its state.

    succeeded goes straight there; an abort asked meanwhile turns any other outcome into
    `aborted`; paused goes to `paused`. A failure (failed, reclaimed, timed_out) goes to
    `paused` when a pause was asked, else to `pending` with a jittered backoff while attempts
    remain (straight to `ready` when the delay is zero), else to `failed`; a failure reported
    as not `retryable` goes to `failed` whatever attempts remain. Finished
    operations keep their state and results: a retry resumes from them.
    `progress_fields`/`execution_fields` name attributes the caller already changed, saved in
    the same UPDATEs.
    """
    execution.outcome = outcome
    execution.ended_at = now
    fields = ["outcome", "ended_at", "updated_at", *execution_fields]
    if diagnostics:
        execution.diagnostics = [*execution.diagnostics, *diagnostics]
        fields.append("diagnostics")
    execution.save(update_fields=sorted(set(fields)))
    state = _agenda_move_on(
        progress, outcome, now=now, message=message, diagnostics=diagnostics,
        progress_fields=progress_fields, retryable=retryable,
    )  # fmt: skip
    # Last, so the lane row (which fills skip while it is locked) is held only until commit.
    lanes_charge([execution], now=now)
    return state


def _agenda_move_on(
    progress: AgendaProgress,
    outcome: str,
    *,
    now: datetime,
    message: str,
    diagnostics: list[dict] | None,
    progress_fields: Iterable[str],
    retryable: bool,
) -> str:
    """execution_end's move of the agenda once its execution has ended."""
    extra = list(progress_fields)
    if outcome in COUNTED_OUTCOMES:
        progress.attempts_completed += 1
        extra.append("attempts_completed")
    if diagnostics:
        progress.diagnostics = [*progress.diagnostics, *diagnostics]
        extra.append("diagnostics")
    if outcome == Outcome.SUCCEEDED:
        progress.percent_complete = 100.0
        transition(
            progress,
            S.SUCCEEDED,
            message=message or "succeeded",
            now=now,
            extra_fields=[*extra, "percent_complete"],
        )
        return progress.state
    if outcome == Outcome.ABORTED or progress.abort_requested:
        transition(progress, S.ABORTED, message=message or "aborted", now=now, extra_fields=extra)
        operations_abort_unfinished(progress)
        return progress.state
    if outcome == Outcome.PAUSED or progress.pause_requested:
        transition(progress, S.PAUSED, message=message or "paused", now=now, extra_fields=extra)
        return progress.state
    if outcome == Outcome.UNANSWERED:  # not an attempt: straight back to the queue
        transition(
            progress,
            S.PENDING,
            message=f"returned to the queue, no attempt used: {message}",
            now=now,
            extra_fields=extra,
        )
        transition(progress, S.READY, now=now)
        return progress.state
    attempt, allowed = progress.attempts_completed, progress.agenda.max_attempts
    if outcome == Outcome.FAILED and not retryable:
        entry = diagnostic(
            f"not retried: the worker reported the failure as permanent ({message})",
            code="not_retryable",
            now=now,
        )
        progress.diagnostics = [*progress.diagnostics, entry]
        transition(
            progress,
            S.FAILED,
            message=f"failed, not retryable (attempt {attempt} of {allowed}): {message}".rstrip(
                ": "
            ),
            now=now,
            extra_fields=[*extra, "diagnostics"],
        )
        return progress.state
    if attempt >= allowed:
        transition(
            progress,
            S.FAILED,
            message=f"failed after {attempt} of {allowed} attempts: {message}".rstrip(": "),
            now=now,
            extra_fields=extra,
        )
        return progress.state
    cap = float(getattr(settings, "POP_RETRY_DELAY_CAP_SECONDS", 600))
    delay = retry_delay(
        retry_delay_seconds=progress.agenda.retry_delay_seconds, attempt=attempt, cap=cap
    )
    progress.run_after = now + timedelta(seconds=delay)
    transition(
        progress,
        S.PENDING,
        message=f"attempt {attempt} of {allowed} failed: {message}; retry in {delay:.1f}s",
        now=now,
        extra_fields=[*extra, "run_after"],
    )
    if delay <= 0:
        transition(progress, S.READY, now=now)
    return progress.state
