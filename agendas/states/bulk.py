"""Set-based forms of the state machine's writes for the hot paths: the fill's
queueing, promotion of due agendas, closing executions, and the batch report's common case.
Each leaves every row exactly as the one-by-one path in `machine` would.
"""

import functools
from collections.abc import Iterable, Mapping
from datetime import datetime

from django.db import connection
from django.db.models import Case, Exists, OuterRef, TextField, Value, When

from agendas.fill_nudge import fill_nudge
from agendas.models import AgendaProgress, AgendaWait, Execution, OperationProgress
from agendas.queue_models import QueuedAgenda, ReadyAgenda
from agendas.states.callback_outbox import callbacks_enqueue
from agendas.states.lanes import lanes_charge, lanes_refund_many, lanes_wake
from agendas.states.machine import (
    FINISH_HOOKS,
    NOTIFY,
    TERMINAL,
    S,
    _log_completed,
    _progress_enter,
    check_transition,
    entry_sql,
    entry_update,
)
from agendas.states.operations import OpState, operation_apply_item
from core.column_inserts import insert_columns
from core.column_updates import update_instances_together

# --- Set-based forms for the hot paths -------------------------------------


def progress_queue_many(
    *, insight_id: object, entries: list[tuple[object, object]], first_position: int, now: datetime
) -> list[object]:
    """Fill: move ready agendas into the insight's queue, in the given order; return the moved ids.

    `entries` are (agenda_id, customer_id) pairs chosen by the fairness picker. Progress rows
    are locked with SKIP LOCKED: an agenda someone is pausing or aborting right now stays where
    it is (that transaction removes it from the queues) and the next fill looks again. The
    moved ones take consecutive positions from `first_position`, in `entries` order.

    On PostgreSQL one statement locks, moves, unreadies and queues them (`_QUEUE_SQL`): the
    three ORM statements it replaced each sent a hundred ids one placeholder apiece, past
    psycopg's cache of converted statements, and cost a fill more than the rest of it. It
    finds the progress rows by `= ANY` of their keys (agenda ids, then the locked row ids):
    joined to the list of ids instead, a table of some 15,000 rows was read whole, twice, with
    the ready table, for a fill of 110 (7.1 ms; 2.9 ms by the keys).
    """
    if not entries:
        return []
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                _queue_statement(connection.vendor),
                {
                    "agendas": [agenda_id for agenda_id, _ in entries],
                    "customers": [customer_id for _, customer_id in entries],
                    "ready": S.READY,
                    "queued": S.QUEUED,
                    "now": now,
                    "insight": insight_id,
                    "first": first_position,
                },
            )
            return [row[0] for row in cursor.fetchall()]
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
        **entry_update(S.QUEUED, now=now)
    )
    ReadyAgenda.objects.filter(agenda_id__in=moved_ids).delete()
    insert_columns(
        QueuedAgenda,
        {
            "agenda_id": moved_ids,
            "insight_id": [insight_id] * len(moved),
            "customer_id": [customer_id for _, customer_id in moved],
            "position": list(range(first_position, first_position + len(moved))),
            "queued_at": [now] * len(moved),
        },
        now=now,
    )
    return moved_ids


_QUEUE_SQL = """
WITH wanted AS (
    SELECT w.agenda_id, w.customer_id, w.ord
    FROM unnest(%(agendas)s::uuid[], %(customers)s::uuid[]) WITH ORDINALITY
         AS w(agenda_id, customer_id, ord)
), locked AS (
    SELECT p.id FROM {progress} p
    WHERE p.agenda_id = ANY(%(agendas)s::uuid[]) AND p.state = %(ready)s
    FOR UPDATE OF p SKIP LOCKED
), moved AS (
    UPDATE {progress} p SET state = %(queued)s, updated_at = %(now)s, {entering}
    WHERE p.id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING p.agenda_id
), placed AS (
    SELECT wanted.agenda_id, wanted.customer_id,
           %(first)s + row_number() OVER (ORDER BY wanted.ord) - 1 AS position
    FROM wanted JOIN moved ON moved.agenda_id = wanted.agenda_id
), unready AS (
    DELETE FROM {ready} r USING placed WHERE r.agenda_id = placed.agenda_id
), queued AS (
    INSERT INTO {queue} (agenda_id, insight_id, customer_id, position, queued_at)
    SELECT placed.agenda_id, %(insight)s, placed.customer_id, placed.position, %(now)s
    FROM placed
)
SELECT agenda_id FROM placed ORDER BY position
"""


@functools.cache
def _queue_statement(vendor: str) -> str:
    """`_QUEUE_SQL` with its tables and the queued state's entry, built once per process."""
    quote = connection.ops.quote_name
    return _QUEUE_SQL.format(
        progress=quote(AgendaProgress._meta.db_table),
        ready=quote(ReadyAgenda._meta.db_table),
        queue=quote(QueuedAgenda._meta.db_table),
        entering=entry_sql(S.QUEUED, table="p", now_parameter="now"),
    )


def progresses_leave_waiting(
    progresses: list[AgendaProgress],
    target: str,
    *,
    message: str,
    now: datetime,
    messages: Mapping[object, str] | None = None,
    release: bool = True,
) -> None:
    """Abort or pause waiting agendas together (actions on a set, `agendas.bulk_actions`; an
    upstream's failure, `waits`): each ends as `transition(progress, target)` would leave it —
    out of the ready set and the queues (a queued one's fair-share charge given back), its row
    entering `target`, an aborted one's unfinished operations aborted, the outbox rows and
    completion lines written, the agendas waiting for it released (unless `release` is False:
    the caller does it). The caller holds the progress rows' locks; `agenda` and its customer
    are loaded on each. `messages` (by agenda id) override `message` for some of them."""
    if not progresses:
        return
    for progress in progresses:
        check_transition(progress, target)
    agenda_ids = [progress.agenda_id for progress in progresses]
    ReadyAgenda.objects.filter(agenda_id__in=agenda_ids).delete()
    QueuedAgenda.objects.filter(agenda_id__in=agenda_ids).delete()
    lanes_refund_many(
        [(p.agenda.insight_id, p.customer_id) for p in progresses if p.state == S.QUEUED], now=now
    )
    messages = messages or {}
    texts = Case(
        *(When(agenda_id=agenda_id, then=Value(text)) for agenda_id, text in messages.items()),
        default=Value(message),
        output_field=TextField(),
    )
    AgendaProgress.objects.filter(pk__in=[progress.pk for progress in progresses]).update(
        **entry_update(target, now=now), message=texts if messages else message
    )
    for progress in progresses:
        text = messages.get(progress.agenda_id, message)
        _progress_enter(progress, target, message=text, now=now)
    if target == S.ABORTED:
        OperationProgress.objects.filter(
            agenda_progress__in=[progress.pk for progress in progresses],
            state__in=[OpState.WAITING, OpState.EXECUTING],
        ).update(state=OpState.ABORTED, completed_at=now, updated_at=now)
    if target in NOTIFY:
        callbacks_enqueue(progresses, event=target, now=now)
    if target in TERMINAL:
        for progress in progresses:
            _log_completed(progress, now=now)
        for hook in FINISH_HOOKS if release else ():
            hook(list(progresses), target, True, now)


def execution_close(
    execution: Execution, outcome: str, *, now: datetime, diagnostics: list[dict] | None = None
) -> None:
    """End an execution that is no longer its agenda's current one; the agenda is untouched."""
    execution.outcome = outcome
    execution.ended_at = now
    execution.diagnostics = [*execution.diagnostics, *(diagnostics or [])]
    execution.save(update_fields=["outcome", "ended_at", "diagnostics", "updated_at"])
    lanes_charge([execution], now=now)


def progress_promote_due(*, now: datetime, limit: int) -> dict[object, int]:
    """Promote: pending agendas whose `run_after` passed (never do_not_run, never one still
    waiting for other agendas) become ready.

    Returns {insight_id: promoted count}. Rows locked elsewhere are skipped until the next run.
    An agenda waiting for agendas has no `run_after` (its wait holds it), so this never reads
    one; the NOT EXISTS is the guard.
    """
    waits = AgendaWait.objects.filter(agenda_id=OuterRef("agenda_id"), ended_at__isnull=True)
    due = list(
        AgendaProgress.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state=S.PENDING, do_not_run=False, run_after__lte=now)
        .filter(~Exists(waits))
        .order_by("run_after")
        .values_list("pk", "agenda_id", "customer_id", "agenda__insight_id", "agenda__priority")[
            :limit
        ]
    )
    return progresses_enter_ready(due, now=now)


def progresses_enter_ready(
    due: list[tuple[object, object, object, object, int]],
    *,
    now: datetime,
    message: str | None = None,
) -> dict[object, int]:
    """Move locked pending agendas to ready: their rows, ready rows, lanes and one fill nudge.

    `due` are (progress pk, agenda id, customer id, insight id, priority); returns
    {insight_id: moved count}.
    """
    if not due:
        return {}
    extra = {} if message is None else {"message": message}
    AgendaProgress.objects.filter(pk__in=[row[0] for row in due], state=S.PENDING).update(
        **entry_update(S.READY, now=now), **extra
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
    lanes_wake((insight_id, customer_id) for _, _, customer_id, insight_id, _ in due)
    promoted: dict[object, int] = {}
    for row in due:
        promoted[row[3]] = promoted.get(row[3], 0) + 1
    fill_nudge(promoted)
    return promoted


# --- Set-based report writes (docs/design.md §6.4; the batch report's common case) ----------------
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
    "pause_now",
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
    """`operations_apply_report` for many agendas at once, on the instances: returns the
    changed ones, which `executions_report_many` writes with the executions and progress.

    Each pair is one agenda's operations by name and its report's items (names checked).
    """
    changed: dict[object, OperationProgress] = {}
    for operations, items in reports:
        for item in items:
            operation = operations[item["name"]]
            if operation_apply_item(operation, item, now=now):
                changed[operation.pk] = operation
    return list(changed.values())


def executions_report_many(
    *,
    operations: list[OperationProgress],
    renewed: list[tuple[AgendaProgress, Execution, bool]],
    succeeded: list[tuple[AgendaProgress, Execution, str]],
    now: datetime,
) -> None:
    """Write many locked current executions' reports with a few statements (PostgreSQL only).

    `operations`: their changed operations (`operations_apply_reports`), written in the one
    statement that writes the executions and progress rows.
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
    update_instances_together(
        [
            (OperationProgress, operations, _REPORT_OPERATION_COLUMNS),
            (
                Execution,
                [execution for _, execution, _ in renewed]
                + [execution for _, execution, _ in succeeded],
                _REPORT_EXECUTION_COLUMNS,
            ),
            (
                AgendaProgress,
                [progress for progress, _, changed in renewed if changed]
                + [progress for progress, _, _ in succeeded],
                _REPORT_PROGRESS_COLUMNS,
            ),
        ]
    )
    callbacks_enqueue([progress for progress, _, _ in succeeded], event=S.SUCCEEDED, now=now)
    for progress, _, _ in succeeded:
        _log_completed(progress, now=now)
    if succeeded:
        for hook in FINISH_HOOKS:
            hook([progress for progress, _, _ in succeeded], S.SUCCEEDED, False, now)
    # Last, so the lane rows (which fills skip while they are locked) are held only until commit.
    lanes_charge([execution for _, execution, _ in succeeded], now=now)
