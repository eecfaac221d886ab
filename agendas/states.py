"""The agenda state machine; DESIGN §3 is the contract.

This module is the only code that writes `AgendaProgress.state` or `OperationProgress.state`
(tests/test_architecture.py enforces it). Each function works inside the caller's transaction;
callers lock the progress row (`select_for_update`) before a single-row transition. Queue
membership (`ReadyAgenda`/`QueuedAgenda`) and the callback outbox (`CallbackDelivery`) change
here too, so they can never disagree with the state.
"""

import functools
import json
import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Case, Count, F, Max, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django_q.tasks import async_task

from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.rows import RowLoader, load_row
from popsite.after_commit import after_commit
from resourcepools.models import Customer, Insight
from scheduling.models import CallbackDelivery, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.agendas")
nudge_logger = logging.getLogger("pop.agendas.nudges")

S = AgendaProgress.State
OpState = OperationProgress.State

TERMINAL: frozenset[str] = frozenset({S.SUCCEEDED, S.FAILED, S.ABORTED})
WAITING: frozenset[str] = frozenset({S.PENDING, S.READY, S.QUEUED, S.PAUSED})
NOTIFY: frozenset[str] = TERMINAL | {S.EXECUTING, S.PAUSED}
ALLOWED: dict[str, frozenset[str]] = {
    S.PENDING: frozenset({S.READY, S.PAUSED, S.ABORTED}),
    S.READY: frozenset({S.QUEUED, S.PAUSED, S.ABORTED}),
    S.QUEUED: frozenset({S.EXECUTING, S.READY, S.PAUSED, S.ABORTED}),
    S.EXECUTING: frozenset({S.SUCCEEDED, S.FAILED, S.PENDING, S.PAUSED, S.ABORTED}),
    S.PAUSED: frozenset({S.READY, S.PENDING, S.ABORTED}),
    # Rerun: back to ready, or to pending with do_not_run when `skip_execution`.
    S.SUCCEEDED: frozenset({S.READY, S.PENDING}),
    S.FAILED: frozenset({S.READY, S.PENDING}),
    S.ABORTED: frozenset({S.READY, S.PENDING}),
}
OPERATION_TERMINAL: frozenset[str] = frozenset({OpState.SUCCEEDED, OpState.FAILED, OpState.ABORTED})


class InvalidTransition(Exception):
    """A move DESIGN §3 does not allow; the API answers 409 naming the current state."""

    def __init__(self, message: str, *, current_state: str) -> None:
        super().__init__(message)
        self.current_state = current_state


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
    (`agenda.progress`). Ready rows get `added_at` one microsecond apart in entry order, so the
    FIFO order within the batch is kept; one fill nudge covers every insight involved.
    """
    progresses = [
        _new_progress(agenda, run_after=run_after, do_not_run=do_not_run, now=now)
        for agenda, run_after, do_not_run in entries
    ]
    AgendaProgress.objects.bulk_create(progresses)
    OperationProgress.objects.bulk_create(
        operation
        for progress in progresses
        for operation in _new_operations(progress, progress.agenda)
    )
    ready = [progress.agenda for progress in progresses if progress.state == S.READY]
    ReadyAgenda.objects.bulk_create(
        ReadyAgenda(
            agenda_id=agenda.pk,
            insight_id=agenda.insight_id,
            customer_id=agenda.customer_id,
            priority=agenda.priority,
            added_at=now + timedelta(microseconds=index),
        )
        for index, agenda in enumerate(ready)
    )
    fill_nudge(agenda.insight_id for agenda in ready)
    for progress in progresses:
        progress.agenda.progress = progress
    return progresses


def _new_progress(
    agenda: Agenda, *, run_after: datetime | None, do_not_run: bool, now: datetime
) -> AgendaProgress:
    # A new agenda starts ready, or pending when held or not yet due (DESIGN §3, submit).
    waiting = do_not_run or (run_after is not None and run_after > now)
    return AgendaProgress(
        agenda=agenda,
        customer_id=agenda.customer_id,
        link_id=agenda.link_id,
        cid=agenda.cid,
        state=S.PENDING if waiting else S.READY,
        message="do not run" if do_not_run else ("waiting for run_after" if waiting else ""),
        run_after=run_after,
        do_not_run=do_not_run,
    )


def _new_operations(progress: AgendaProgress, agenda: Agenda) -> list[OperationProgress]:
    return [
        OperationProgress(
            agenda_progress=progress,
            customer_id=agenda.customer_id,
            link_id=agenda.link_id,
            cid=agenda.cid,
            position=index,
            name=operation["name"],
            type=operation["type"],
            state=OpState.WAITING,
        )
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
    fields = {"state", "updated_at", *extra_fields}
    if source in (S.READY, S.QUEUED) and target != S.QUEUED:
        # Leaving the queues: a paused or aborted agenda must never be pulled (DESIGN §5.3).
        ReadyAgenda.objects.filter(agenda_id=progress.agenda_id).delete()
        QueuedAgenda.objects.filter(agenda_id=progress.agenda_id).delete()
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


def _progress_enter(
    progress: AgendaProgress, target: str, *, message: str | None, now: datetime
) -> set[str]:
    """The row-level part of entering `target` (no queue rows, no outbox, no save): set the
    state, message, timestamps and flags; return the fields changed."""
    fields = {"state"}
    progress.state = target
    if message is not None:
        progress.message = message
        fields.add("message")
    if target == S.READY:
        progress.abort_requested = progress.pause_requested = False
        progress.completed_at = None
        fields |= {"abort_requested", "pause_requested", "completed_at"}
    elif target == S.EXECUTING and progress.started_at is None:
        progress.started_at = now
        fields.add("started_at")
    elif target in TERMINAL:
        progress.completed_at = now
        progress.abort_requested = progress.pause_requested = False
        fields |= {"completed_at", "abort_requested", "pause_requested"}
    elif target == S.PAUSED:
        progress.pause_requested = False
        fields.add("pause_requested")
    if target != S.EXECUTING and progress.current_execution_id is not None:
        progress.current_execution = None
        fields.add("current_execution")
    return fields


def _log_completed(progress: AgendaProgress, *, now: datetime) -> None:
    # One structured line per completed agenda, written only if the transaction commits.
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


def callback_enqueue(progress: AgendaProgress, *, event: str, now: datetime) -> None:
    """Write the outbox row for `event` when the agenda or its customer has a callback URL."""
    delivery = _callback_delivery(progress, event=event, now=now)
    if delivery is not None:
        delivery.save(force_insert=True)


def _callback_delivery(
    progress: AgendaProgress, *, event: str, now: datetime
) -> CallbackDelivery | None:
    agenda = progress.agenda
    url = agenda.callback_url or agenda.customer.callback_url
    if not url:
        return None
    return CallbackDelivery(
        agenda_id=agenda.pk,
        customer_id=agenda.customer_id,
        link_id=agenda.link_id,
        cid=agenda.cid,
        url=url,
        event=event,
        body={
            "event": event,
            "agenda_id": str(agenda.pk),
            "link_id": agenda.link_id,
            "external_id": agenda.external_id,
            "customer": agenda.customer.slug,
            "state": progress.state,
            "processing_state": processing_state(progress.state),
            "percent_complete": progress.percent_complete,
            "attempts_completed": progress.attempts_completed,
            "occurred_at": now.isoformat(),
        },
        next_attempt_at=now,
    )


def operation_set_state(
    operation: OperationProgress, target: str, *, now: datetime | None = None
) -> list[str]:
    """Set an operation's state and its timing; return the fields changed (caller saves)."""
    if target not in OpState.values:
        raise ValueError(f"unknown operation state {target!r}")
    if operation.state == target:
        return []
    now = now or timezone.now()
    changed = ["state"]
    if target == OpState.EXECUTING:
        operation.attempt_count += 1
        operation.started_at = now
        operation.completed_at = None
        changed += ["attempt_count", "started_at", "completed_at"]
    elif target in OPERATION_TERMINAL:
        if operation.state == OpState.WAITING and target in (OpState.SUCCEEDED, OpState.FAILED):
            # Reports are sparse (DESIGN §5.4): an operation that started and finished between
            # two reports arrives only as done. It still ran once, starting no later than now.
            operation.attempt_count += 1
            operation.started_at = now
            changed += ["attempt_count", "started_at"]
        operation.completed_at = now
        changed.append("completed_at")
        if target == OpState.SUCCEEDED:
            operation.percent_complete = 100.0
            changed.append("percent_complete")
    operation.state = target
    return changed


def operations_reset(progress: AgendaProgress, names: Iterable[str] | None) -> int:
    """Put the named operations (all when `names` is None) back to waiting; return the count."""
    operations = OperationProgress.objects.filter(agenda_progress=progress)
    if names is not None:
        operations = operations.filter(name__in=list(names))
    return operations.update(
        state=OpState.WAITING,
        percent_complete=0.0,
        message="",
        result=None,
        params={},
        diagnostics=[],
        started_at=None,
        completed_at=None,
        updated_at=timezone.now(),
    )


def operations_abort_unfinished(progress: AgendaProgress) -> int:
    """Mark the agenda's waiting and executing operations aborted (the agenda was aborted)."""
    return OperationProgress.objects.filter(
        agenda_progress=progress, state__in=[OpState.WAITING, OpState.EXECUTING]
    ).update(state=OpState.ABORTED, completed_at=timezone.now(), updated_at=timezone.now())


# --- Fill nudges (DESIGN §5.2) ------------------------------------------------------------
# Entering `ready` asks for a fill of the agenda's insight once the transaction commits; so
# does a pull that leaves the queue under half full or finds it empty while work is ready.
# Nudges are throttled per process and insight (POP_FILL_NUDGE_MIN_INTERVAL), but never
# dropped: a nudge inside the throttle window arms one trailing nudge for the window's end.
# The periodic fill stays the backstop (a process that exits loses its pending trailing nudge).
FILL_TASK = "scheduling.tasks.insight_fill"
_last_nudge: dict[str, float] = {}
# Pending trailing nudges: insight id -> (when it falls due, on the monotonic clock; mode).
_trailing_nudges: dict[str, tuple[float, str]] = {}
_nudge_lock = threading.Lock()
_nudge_wakeup = threading.Condition(_nudge_lock)
_nudge_thread: threading.Thread | None = None


def fill_nudge(insight_ids: Iterable[object]) -> None:
    """After commit, enqueue a fill of each insight whose queue has room (POP_FILL_NUDGE)."""
    mode = getattr(settings, "POP_FILL_NUDGE", "async")
    ids = sorted({str(insight_id) for insight_id in insight_ids})
    if not ids or mode == "off":
        return
    after_commit(_fill_nudge_now, ids, mode)


def _fill_nudge_now(insight_ids: list[str], mode: str) -> None:
    """Nudge each insight now, or, inside its throttle window, once at the window's end.

    Throttled per process: a burst of submits to one insight enqueues one fill at once and one
    trailing fill when POP_FILL_NUDGE_MIN_INTERVAL has passed since, which sees every agenda
    the burst committed. At most one trailing nudge is pending per insight per process (later
    nudges in the window ride on it); one daemon thread per process sends them when they fall
    due, with the same room check and enqueue (`sync`: the fill itself), on one database
    connection it keeps between them.
    """
    interval = float(getattr(settings, "POP_FILL_NUDGE_MIN_INTERVAL", 0.02))
    clock = time.monotonic()
    due = []
    with _nudge_lock:
        for pk in insight_ids:
            wait = _last_nudge.get(pk, -math.inf) + interval - clock
            if wait <= 0:
                due.append(pk)
            elif pk not in _trailing_nudges:
                _trailing_nudges[pk] = (clock + wait, mode)
                _trailing_thread_running()
                _nudge_wakeup.notify()
    if due:
        _fill_nudge_send(due, mode)


def _trailing_thread_running() -> None:
    # Called with _nudge_lock held.
    global _nudge_thread
    if _nudge_thread is None or not _nudge_thread.is_alive():
        _nudge_thread = threading.Thread(
            target=_trailing_nudges_loop, name="pop-fill-nudges", daemon=True
        )
        _nudge_thread.start()


def _trailing_nudges_loop() -> None:
    """Send each pending trailing nudge when it falls due, forever (a daemon thread).

    One thread and one connection per process: a thread per nudge opened and closed a
    database connection per nudge, up to 1/POP_FILL_NUDGE_MIN_INTERVAL a second per insight.
    """
    while True:
        with _nudge_wakeup:
            if _nudge_thread is not threading.current_thread():
                connection.close()  # stopped (fill_nudges_cancel): leave no connection behind
                return
            now = time.monotonic()
            ready = [(pk, mode) for pk, (at, mode) in _trailing_nudges.items() if at <= now]
            if not ready:
                next_at = min((at for at, _ in _trailing_nudges.values()), default=None)
                _nudge_wakeup.wait(None if next_at is None else next_at - now)
                continue
            for pk, _ in ready:
                del _trailing_nudges[pk]
        for pk, mode in ready:
            try:
                connection.close_if_unusable_or_obsolete()
                _fill_nudge_send([pk], mode)
            except Exception:
                # Best effort, like every nudge: the periodic fill picks the work up.
                nudge_logger.exception("trailing fill nudge of insight %s failed", pk)
                connection.close()  # a broken connection is opened afresh next time


def _fill_nudge_send(insight_ids: list[str], mode: str) -> None:
    with_room = (
        Insight.objects.filter(pk__in=insight_ids)
        .annotate(queued=Count("queued_agendas"))
        .filter(queued__lt=F("queue_size"))
        .values_list("pk", flat=True)
    )
    for insight_id in with_room:
        with _nudge_lock:
            _last_nudge[str(insight_id)] = time.monotonic()
        async_task(
            FILL_TASK, str(insight_id), sync=mode == "sync", group="pop-fill-nudge", save=False
        )


def _fill_nudges_after_fork() -> None:
    # A forked child (gunicorn, django-q workers, bench roles) inherits the pending nudges but
    # not the thread that sends them: forget them, or the child would count on a trailing
    # nudge that never fires. The lock may have been held by another thread at fork time:
    # make a new one.
    global _nudge_lock, _nudge_wakeup, _nudge_thread
    _nudge_lock = threading.Lock()
    _nudge_wakeup = threading.Condition(_nudge_lock)
    _nudge_thread = None
    _trailing_nudges.clear()


os.register_at_fork(after_in_child=_fill_nudges_after_fork)


def fill_nudges_cancel(*, timeout: float = 10.0) -> None:
    """Forget throttle state and pending trailing nudges, and stop the thread that sends them,
    which closes its database connection (tests, process shutdown)."""
    global _nudge_thread
    with _nudge_wakeup:
        thread, _nudge_thread = _nudge_thread, None
        _trailing_nudges.clear()
        _last_nudge.clear()
        _nudge_wakeup.notify_all()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)


# --- Set-based forms for the hot paths (STYLE rule 1) -------------------------------------


def progress_queue_many(
    *, insight_id: object, entries: list[tuple[object, object]], first_position: int, now: datetime
) -> list[object]:
    """Fill: move ready agendas into the insight's queue, in the given order; return the moved ids.

    `entries` are (agenda_id, customer_id) pairs chosen by the fairness picker. Progress rows
    are locked with SKIP LOCKED: an agenda someone is pausing or aborting right now stays where
    it is (that transaction removes it from the queues) and the next fill looks again.
    """
    if not entries:
        return []
    agenda_ids = [agenda_id for agenda_id, _ in entries]
    locked = set(
        AgendaProgress.objects.select_for_update(skip_locked=True)
        .filter(agenda_id__in=agenda_ids, state=S.READY)
        .values_list("agenda_id", flat=True)
    )
    moved = [(agenda_id, customer_id) for agenda_id, customer_id in entries if agenda_id in locked]
    if not moved:
        return []
    moved_ids = [agenda_id for agenda_id, _ in moved]
    AgendaProgress.objects.filter(agenda_id__in=moved_ids, state=S.READY).update(
        state=S.QUEUED, updated_at=now
    )
    ReadyAgenda.objects.filter(agenda_id__in=moved_ids).delete()
    QueuedAgenda.objects.bulk_create(
        QueuedAgenda(
            agenda_id=agenda_id,
            insight_id=insight_id,
            customer_id=customer_id,
            position=first_position + offset,
            queued_at=now,
        )
        for offset, (agenda_id, customer_id) in enumerate(moved)
    )
    return moved_ids


def executions_start(
    *, progresses: list[AgendaProgress], insight: Insight, worker: str, now: datetime
) -> list[Execution]:
    """Pull, portable form: move locked, claimed (queue row deleted) agendas to executing with a
    new lease each. PostgreSQL claims in one statement instead (`_queue_claim_postgresql`).

    `Execution.number` is one more than the agenda's highest so far (a rerun resets
    `attempts_completed`, so the number cannot come from it).
    """
    if not progresses:
        return []
    agenda_ids = [progress.agenda_id for progress in progresses]
    highest = dict(
        Execution.objects.filter(agenda_id__in=agenda_ids)
        .values_list("agenda_id")
        .annotate(n=Max("number"))
        .values_list("agenda_id", "n")
    )
    lease_expires_at = now + timedelta(seconds=insight.lease_seconds)
    executions = [
        Execution(
            agenda_id=progress.agenda_id,
            customer_id=progress.customer_id,
            link_id=progress.link_id,
            cid=progress.cid,
            number=(highest.get(progress.agenda_id) or 0) + 1,
            insight_id=insight.pk,
            worker=worker,
            lease_expires_at=lease_expires_at,
            started_at=now,
        )
        for progress in progresses
    ]
    Execution.objects.bulk_create(executions)
    message = f"executing on {worker}" if worker else "executing"
    updated = AgendaProgress.objects.filter(
        pk__in=[progress.pk for progress in progresses], state=S.QUEUED
    ).update(
        state=S.EXECUTING,
        current_execution_id=Case(
            *(
                When(pk=progress.pk, then=Value(execution.pk))
                for progress, execution in zip(progresses, executions, strict=True)
            ),
            output_field=AgendaProgress._meta.get_field("current_execution").target_field,
        ),
        started_at=Coalesce("started_at", Value(now)),
        message=message,
        updated_at=now,
    )
    if updated != len(progresses):
        # The caller locked these rows in state `queued`; anything else is a bug, not a race.
        raise RuntimeError(f"pull moved {updated} of {len(progresses)} locked agendas")
    for progress, execution in zip(progresses, executions, strict=True):
        progress.state = S.EXECUTING
        progress.current_execution = execution
        progress.started_at = progress.started_at or now
        progress.message = message
        progress.updated_at = now
        callback_enqueue(progress, event=S.EXECUTING, now=now)
    return executions


def queue_claim(
    *, insight: Insight, count: int, worker: str, now: datetime
) -> list[tuple[AgendaProgress, Execution]]:
    """Pull: lease up to `count` queued agendas of `insight` in queue order (DESIGN §5.3).

    Queue rows and their progress rows are locked with FOR UPDATE SKIP LOCKED, so rival
    pullers pass each other and an agenda being paused or aborted right now is left alone.
    Returns (progress, execution) pairs in queue order, each progress (state `executing`)
    with its agenda and the agenda's customer loaded.

    Also nudges a fill (DESIGN §5.2) when the claim leaves the queue under half of
    `queue_size`, or when it finds the queue empty while the insight has ready agendas.

    On PostgreSQL the claim is one statement (`_queue_claim_postgresql`); elsewhere (the
    SQLite demo) it is the portable ORM form below, where a DELETE … RETURNING of the queue
    rows is the checked conditional write that keeps claims exclusive (SQLite ignores
    FOR UPDATE).
    """
    if connection.vendor == "postgresql":
        claimed, queued_before, ready = _queue_claim_postgresql(
            insight=insight, count=count, worker=worker, now=now
        )
    else:
        claimed = _queue_claim_portable(insight=insight, count=count, worker=worker, now=now)
        queued_before = QueuedAgenda.objects.filter(insight_id=insight.pk).count() + len(claimed)
        ready = (
            not claimed
            and not queued_before
            and ReadyAgenda.objects.filter(insight_id=insight.pk).exists()
        )
    if claimed:
        if (queued_before - len(claimed)) * 2 < insight.queue_size:
            fill_nudge([insight.pk])
    elif ready and not queued_before:
        fill_nudge([insight.pk])
    return claimed


_CLAIM_SQL = """
WITH picked AS (
    SELECT q.id AS queue_id, q.position, p.id AS progress_id, p.agenda_id, p.customer_id,
           p.link_id, p.cid
    FROM {queue} q
    JOIN {progress} p ON p.agenda_id = q.agenda_id AND p.state = %(queued)s
    WHERE q.insight_id = %(insight)s
    ORDER BY q.position
    LIMIT %(count)s
    FOR UPDATE OF q, p SKIP LOCKED
), claimed AS (
    DELETE FROM {queue} q USING picked WHERE q.id = picked.queue_id
    RETURNING q.id
), started AS (
    INSERT INTO {execution} AS e (id, agenda_id, customer_id, link_id, cid, number, insight_id,
        worker, lease_token, lease_expires_at, started_at, diagnostics, created_at, updated_at)
    SELECT gen_random_uuid(), picked.agenda_id, picked.customer_id, picked.link_id, picked.cid,
        coalesce((SELECT max(x.number) FROM {execution} x
                  WHERE x.agenda_id = picked.agenda_id), 0) + 1,
        %(insight)s, %(worker)s, gen_random_uuid(), %(lease_expires_at)s, %(now)s,
        '[]'::jsonb, %(now)s, %(now)s
    FROM picked JOIN claimed ON claimed.id = picked.queue_id
    RETURNING e.*
), moved AS (
    UPDATE {progress} p
    SET state = %(executing)s, current_execution_id = started.id,
        started_at = coalesce(p.started_at, %(now)s), message = %(message)s,
        updated_at = %(now)s
    FROM started JOIN picked ON picked.agenda_id = started.agenda_id
    WHERE p.id = picked.progress_id
    RETURNING p.*
), counts AS (
    SELECT (SELECT count(*) FROM (SELECT 1 FROM {queue} WHERE insight_id = %(insight)s
                                  LIMIT %(probe)s) AS probe) AS queued,
           EXISTS (SELECT 1 FROM {ready} WHERE insight_id = %(insight)s) AS ready
)
SELECT picked.position, counts.queued, counts.ready, (SELECT count(*) FROM started), {columns}
FROM counts
LEFT JOIN (moved
           JOIN picked ON picked.progress_id = moved.id
           JOIN started ON started.id = moved.current_execution_id
           JOIN {agenda} a ON a.id = moved.agenda_id
           JOIN {customer} c ON c.id = a.customer_id) ON true
"""


@functools.cache
def _claim_statement(vendor: str) -> tuple[str, list[RowLoader]]:
    """The claim's SQL and the loaders of its rows, built once per process and vendor: the
    progress rows as moved, the new executions, the agendas and their customers."""
    loaders = [
        RowLoader(AgendaProgress, "moved"),
        RowLoader(Execution, "started"),
        RowLoader(Agenda, "a"),
        RowLoader(Customer, "c"),
    ]
    quote = connection.ops.quote_name
    sql = _CLAIM_SQL.format(
        queue=quote(QueuedAgenda._meta.db_table),
        progress=quote(AgendaProgress._meta.db_table),
        execution=quote(Execution._meta.db_table),
        ready=quote(ReadyAgenda._meta.db_table),
        agenda=quote(Agenda._meta.db_table),
        customer=quote(Customer._meta.db_table),
        columns=", ".join(column for loader in loaders for column in loader.columns),
    )
    return sql, loaders


def _queue_claim_postgresql(
    *, insight: Insight, count: int, worker: str, now: datetime
) -> tuple[list[tuple[AgendaProgress, Execution]], int, bool]:
    """The claim as one data-modifying CTE: lock queue and progress rows together (FOR UPDATE
    OF q, p SKIP LOCKED), delete the queue rows, insert the executions numbered max + 1 per
    agenda, move the progress rows to executing, and return them with their executions,
    agendas and customers. The progress rows are updated by primary key, without testing
    their state again: `picked` holds their locks, taken on rows that were `queued`. Joined
    on agenda and state instead, the UPDATE was driven from the state index when the
    statistics were stale, reading every queued row (a claim of 10 with 4,000 queued: 12 ms,
    6.8 ms by primary key; 1.4 ms either way with fresh statistics).
    The same statement counts the queue as it was before the claim
    (capped: enough to tell "under half full" afterwards) and whether the insight has ready
    agendas.

    Returns the claimed pairs in queue order, the queue length before the claim (capped) and
    whether ready agendas exist.
    """
    sql, loaders = _claim_statement(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(
            sql,
            {
                "insight": insight.pk,
                "count": count,
                # Queue rows before the claim, counted up to what proves "not under half".
                "probe": count + (insight.queue_size + 1) // 2,
                "worker": worker,
                "message": f"executing on {worker}" if worker else "executing",
                "now": now,
                "lease_expires_at": now + timedelta(seconds=insight.lease_seconds),
                "queued": S.QUEUED,
                "executing": S.EXECUTING,
            },
        )
        rows = cursor.fetchall()
    queued_before, ready, started = rows[0][1], rows[0][2], rows[0][3]
    found = sorted((row for row in rows if row[0] is not None), key=lambda row: row[0])
    if len(found) != started:
        # The claim deleted queue rows and started executions it could not hand back.
        raise RuntimeError(f"pull returned {len(found)} of {started} claimed agendas")
    claimed = []
    for _, _, _, _, *columns in found:
        progress, execution, agenda, customer = load_row(loaders, columns)
        agenda.customer = customer
        progress.agenda = agenda
        progress.current_execution = execution
        callback_enqueue(progress, event=S.EXECUTING, now=now)
        claimed.append((progress, execution))
    return claimed, queued_before, ready


def _queue_claim_portable(
    *, insight: Insight, count: int, worker: str, now: datetime
) -> list[tuple[AgendaProgress, Execution]]:
    rows = list(
        QueuedAgenda.objects.filter(insight_id=insight.pk)
        .order_by("position")
        .select_for_update(skip_locked=True)
        .values_list("pk", "agenda_id")[:count]
    )
    if not rows:
        return []
    progresses = {
        progress.agenda_id: progress
        for progress in AgendaProgress.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("agenda", "agenda__customer")
        .filter(agenda_id__in=[agenda_id for _, agenda_id in rows], state=S.QUEUED)
    }
    wanted = [pk for pk, agenda_id in rows if agenda_id in progresses]
    if not wanted:
        return []
    table = connection.ops.quote_name(QueuedAgenda._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {table} WHERE id IN ({', '.join(['%s'] * len(wanted))}) "
            "RETURNING agenda_id",
            wanted,
        )
        claimed = {uuid.UUID(str(agenda_id)) for (agenda_id,) in cursor.fetchall()}
    ordered = [progresses[agenda_id] for _, agenda_id in rows if agenda_id in claimed]
    executions = executions_start(progresses=ordered, insight=insight, worker=worker, now=now)
    return list(zip(ordered, executions, strict=True))


def execution_close(
    execution: Execution, outcome: str, *, now: datetime, diagnostics: list[dict] | None = None
) -> None:
    """End an execution that is no longer its agenda's current one; the agenda is untouched."""
    execution.outcome = outcome
    execution.ended_at = now
    execution.diagnostics = [*execution.diagnostics, *(diagnostics or [])]
    execution.save(update_fields=["outcome", "ended_at", "diagnostics", "updated_at"])


def progress_promote_due(*, now: datetime, limit: int) -> dict[object, int]:
    """Promote: pending agendas whose `run_after` passed (never do_not_run) become ready.

    Returns {insight_id: promoted count}. Rows locked elsewhere are skipped until the next run.
    """
    due = list(
        AgendaProgress.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state=S.PENDING, do_not_run=False)
        .filter(Q(run_after__lte=now) | Q(run_after__isnull=True))
        .order_by("run_after")
        .values_list("pk", "agenda_id", "customer_id", "agenda__insight_id", "agenda__priority")[
            :limit
        ]
    )
    if not due:
        return {}
    AgendaProgress.objects.filter(pk__in=[row[0] for row in due], state=S.PENDING).update(
        state=S.READY,
        abort_requested=False,
        pause_requested=False,
        completed_at=None,
        current_execution=None,
        updated_at=now,
    )
    ReadyAgenda.objects.bulk_create(
        ReadyAgenda(
            agenda_id=agenda_id,
            insight_id=insight_id,
            customer_id=customer_id,
            priority=priority,
            added_at=now,
        )
        for _, agenda_id, customer_id, insight_id, priority in due
    )
    promoted: dict[object, int] = {}
    for row in due:
        promoted[row[3]] = promoted.get(row[3], 0) + 1
    fill_nudge(promoted)
    return promoted


# --- Execution outcomes and the retry policy (DESIGN §3, §5.4, §7) -------------------------
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
    """One diagnostics entry as DESIGN §2 shapes them."""
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
) -> str:
    """End the locked current `execution` with `outcome` and move its agenda on; return its state.

    succeeded goes straight there; an abort asked meanwhile turns any other outcome into
    `aborted`; paused goes to `paused`. A failure (failed, reclaimed, timed_out) goes to
    `paused` when a pause was asked, else to `pending` with a jittered backoff while attempts
    remain (straight to `ready` when the delay is zero), else to `failed`. Finished
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
    attempt, allowed = progress.attempts_completed, progress.agenda.max_attempts
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


def operations_apply_report(
    operations: dict[str, OperationProgress], items: list[dict], *, now: datetime
) -> list[OperationProgress]:
    """Apply a report's sparse operation items (names already checked) and save what changed."""
    changed: list[OperationProgress] = []
    for item in items:
        operation = operations[item["name"]]
        fields = _operation_apply_item(operation, item, now=now)
        if fields:
            operation.save(update_fields=sorted({*fields, "updated_at"}))
            changed.append(operation)
    return changed


def _operation_apply_item(operation: OperationProgress, item: dict, *, now: datetime) -> list[str]:
    fields = []
    if item.get("state") is not None:
        fields += operation_set_state(operation, item["state"], now=now)
    # A worker reports an operation's whole diagnostics list, so it replaces the stored one.
    for name in ("percent_complete", "message", "result", "params", "diagnostics"):
        if name in item and getattr(operation, name) != item[name]:
            setattr(operation, name, item[name])
            fields.append(name)
    return fields


def percent_rollup(operations: Iterable[OperationProgress]) -> float:
    """Agenda percent: (succeeded × 100 + Σ percent of running operations) / n (DESIGN §5.4)."""
    operations = list(operations)
    if not operations:
        return 0.0
    total = sum(
        100.0
        if operation.state == OpState.SUCCEEDED
        else operation.percent_complete
        if operation.state == OpState.EXECUTING
        else 0.0
        for operation in operations
    )
    return round(min(100.0, max(0.0, total / len(operations))), 2)


def operations_fail_running(progress: AgendaProgress, *, message: str, now: datetime) -> int:
    """Mark the agenda's executing operations failed (their worker is gone); return the count."""
    return OperationProgress.objects.filter(
        agenda_progress=progress, state=OpState.EXECUTING
    ).update(state=OpState.FAILED, message=message, completed_at=now, updated_at=now)


def operations_append(
    progress: AgendaProgress, items: list[dict], *, now: datetime
) -> list[OperationProgress]:
    """Add generated operations (waiting) after the agenda's existing ones (POP updateAgenda).

    Each keeps its whole definition, so a retry's pull can hand it to the next worker."""
    last = (
        OperationProgress.objects.filter(agenda_progress=progress)
        .order_by("-position")
        .values_list("position", flat=True)
        .first()
    )
    start = -1 if last is None else last
    return OperationProgress.objects.bulk_create(
        OperationProgress(
            agenda_progress=progress,
            customer_id=progress.customer_id,
            link_id=progress.link_id,
            cid=progress.cid,
            position=start + 1 + offset,
            name=item["name"],
            type=item["type"],
            state=OpState.WAITING,
            is_generated=True,
            definition=item,
        )
        for offset, item in enumerate(items)
    )


# --- Set-based report writes (DESIGN §5.4; the batch report's common case) ----------------
# Columns written back from the locked, loaded rows: every column a progress report or a plain
# `succeeded` report can change, so each row ends exactly as the one-by-one path leaves it.
_REPORT_EXECUTION_COLUMNS = ("last_report_at", "lease_expires_at", "outcome", "ended_at")
_REPORT_PROGRESS_COLUMNS = (
    "state",
    "message",
    "percent_complete",
    "attempts_completed",
    "completed_at",
    "abort_requested",
    "pause_requested",
    "current_execution_id",
)
_REPORT_OPERATION_COLUMNS = (
    "state",
    "percent_complete",
    "message",
    "result",
    "params",
    "diagnostics",
    "attempt_count",
    "started_at",
    "completed_at",
)


def operations_apply_reports(
    reports: Iterable[tuple[dict[str, OperationProgress], list[dict]]], *, now: datetime
) -> list[OperationProgress]:
    """`operations_apply_report` for many agendas at once: one UPDATE for every changed row.

    Each pair is one agenda's operations by name and its report's items (names checked).
    PostgreSQL only.
    """
    changed: dict[object, OperationProgress] = {}
    for operations, items in reports:
        for item in items:
            operation = operations[item["name"]]
            if _operation_apply_item(operation, item, now=now):
                changed[operation.pk] = operation
    _update_from_values(OperationProgress, list(changed.values()), _REPORT_OPERATION_COLUMNS)
    return list(changed.values())


def executions_report_many(
    *,
    renewed: list[tuple[AgendaProgress, Execution, bool]],
    succeeded: list[tuple[AgendaProgress, Execution, str]],
    now: datetime,
) -> None:
    """Write many locked current executions' reports with a few statements (PostgreSQL only).

    `renewed`: (progress, execution, progress changed) for progress reports — the caller set
    the execution's `last_report_at`/`lease_expires_at` and any progress percent or message.
    `succeeded`: (progress, execution, message) for plain final `succeeded` reports — each
    ends as `execution_end(…, SUCCEEDED)` would end it: execution closed, agenda succeeded,
    an attempt counted, the outbox row and the completion line written.
    """
    for progress, execution, message in succeeded:
        check_transition(progress, S.SUCCEEDED)
        execution.outcome = Execution.Outcome.SUCCEEDED
        execution.ended_at = now
        progress.attempts_completed += 1
        progress.percent_complete = 100.0
        _progress_enter(progress, S.SUCCEEDED, message=message or "succeeded", now=now)
    _update_from_values(
        Execution,
        [execution for _, execution, _ in renewed] + [execution for _, execution, _ in succeeded],
        _REPORT_EXECUTION_COLUMNS,
    )
    _update_from_values(
        AgendaProgress,
        [progress for progress, _, changed in renewed if changed]
        + [progress for progress, _, _ in succeeded],
        _REPORT_PROGRESS_COLUMNS,
    )
    deliveries = [
        _callback_delivery(progress, event=S.SUCCEEDED, now=now) for progress, _, _ in succeeded
    ]
    CallbackDelivery.objects.bulk_create([d for d in deliveries if d is not None])
    for progress, _, _ in succeeded:
        _log_completed(progress, now=now)


def _update_from_values(model, rows: list, attnames: Iterable[str], *, chunk: int = 1000) -> None:
    """UPDATE `model` rows to their instances' values of `attnames` (and a fresh `updated_at`,
    as `save()` would set it) with `UPDATE … FROM (VALUES …)`, `chunk` rows a statement."""
    if not rows:
        return
    stamp = timezone.now()
    for row in rows:
        row.updated_at = stamp
    by_attname = {field.attname: field for field in model._meta.concrete_fields}
    fields = [model._meta.pk, *(by_attname[name] for name in (*attnames, "updated_at"))]
    quote = connection.ops.quote_name
    row_sql = "(" + ", ".join(f"%s::{field.db_type(connection)}" for field in fields) + ")"
    names = ", ".join(quote(field.column) for field in fields)
    assignments = ", ".join(f"{quote(f.column)} = v.{quote(f.column)}" for f in fields[1:])
    pk = quote(model._meta.pk.column)
    with connection.cursor() as cursor:
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            params = [
                field.get_db_prep_save(getattr(row, field.attname), connection)
                for row in part
                for field in fields
            ]
            cursor.execute(
                f"UPDATE {quote(model._meta.db_table)} AS t SET {assignments} "
                f"FROM (VALUES {', '.join([row_sql] * len(part))}) AS v({names}) "
                f"WHERE t.{pk} = v.{pk}",
                params,
            )
