"""The pull's claim: queued agendas to `executing` in one statement (PostgreSQL) or a portable
sequence, each with a new execution and its lease (`executions_start`).
"""

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Case, Max, Value, When

from agendas.fill_nudge import fill_nudge
from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.queue_models import QueuedAgenda, ReadyAgenda
from agendas.states.machine import S, callback_enqueue, entry_sql, entry_update
from agendas.states.operation_rows import pulled_operations_load, pulled_operations_sql
from core.rows import RowLoader, load_row, relate_one_way, select_list
from core.statement_text import among, compact_statement
from resourcepools.models import Customer, Insight


def executions_start(
    *,
    progresses: list[AgendaProgress],
    insight: Insight,
    worker: str,
    now: datetime,
    pull_request: str = "",
) -> list[Execution]:
    """Pull, portable form: move locked, claimed (queue row deleted) agendas to executing with a
    new lease each. PostgreSQL claims in one statement instead (`_queue_claim_postgresql`).

    `Execution.number` is one more than the agenda's latest (`last_execution_number`, which a
    rerun keeps; `attempts_completed` restarts at a rerun, so the number cannot come from it),
    read from the executions for a row older than that column (NULL).
    """
    if not progresses:
        return []
    older = [p.agenda_id for p in progresses if p.last_execution_number is None]
    highest = (
        dict(
            Execution.objects.filter(agenda_id__in=older)
            .values_list("agenda_id")
            .annotate(n=Max("number"))
            .values_list("agenda_id", "n")
        )
        if older
        else {}
    )
    lease_expires_at = now + timedelta(seconds=insight.lease_seconds)
    executions = [
        Execution(
            agenda_id=progress.agenda_id,
            customer_id=progress.customer_id,
            link_id=progress.link_id,
            cid=progress.cid,
            number=_last_number(progress, highest) + 1,
            insight_id=insight.pk,
            worker=worker,
            pull_request=pull_request,
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
        **entry_update(S.EXECUTING, now=now),
        current_execution_id=_each_row(
            progresses,
            [execution.pk for execution in executions],
            AgendaProgress._meta.get_field("current_execution").target_field,
        ),
        message=message,
        last_execution_number=_each_row(
            progresses,
            [execution.number for execution in executions],
            AgendaProgress._meta.get_field("last_execution_number"),
        ),
    )
    if updated != len(progresses):
        # The caller locked these rows in state `queued`; anything else is a bug, not a race.
        raise RuntimeError(f"pull moved {updated} of {len(progresses)} locked agendas")
    for progress, execution in zip(progresses, executions, strict=True):
        progress.state = S.EXECUTING
        progress.current_execution = execution
        progress.started_at = progress.started_at or now
        progress.last_execution_number = execution.number
        progress.message = message
        progress.updated_at = now
        callback_enqueue(progress, event=S.EXECUTING, now=now)
    return executions


def _each_row(progresses: list[AgendaProgress], values: list, field) -> Case:
    """An UPDATE value giving each progress row (by primary key) its own of `values`."""
    return Case(
        *(
            When(pk=progress.pk, then=Value(value))
            for progress, value in zip(progresses, values, strict=True)
        ),
        output_field=field,
    )


def _last_number(progress: AgendaProgress, highest: dict) -> int:
    if progress.last_execution_number is not None:
        return progress.last_execution_number
    return highest.get(progress.agenda_id) or 0  # a row older than the column


@dataclass(frozen=True)
class ClaimOutcome:
    """What one claim leased, and whether the insight's queue wants a fill now: the claim left
    it under half of `queue_size` (or found it empty), or took fewer than it asked for (rival
    claims held the other rows), while the insight has ready agendas."""

    claimed: list[tuple[AgendaProgress, Execution]]
    fill_wanted: bool
    nudge_wanted: bool  # fill_wanted, or a claim that left the queue short
    # The claimed agendas' operations by progress id, when the claim read them (PostgreSQL:
    # only the fields a pull hands on, `operation_rows.PULLED_OPERATION_ATTNAMES`).
    operations: dict[object, list[OperationProgress]] | None = None


def queue_claim(
    *, insight: Insight, count: int, worker: str, now: datetime, pull_request: str = ""
) -> list[tuple[AgendaProgress, Execution]]:
    """Pull: lease up to `count` queued agendas of `insight` in queue order (docs/design.md §6.3).

    The (progress, execution) pairs of `queue_claim_outcome`, which documents the claim.
    """
    return queue_claim_outcome(
        insight=insight, count=count, worker=worker, now=now, pull_request=pull_request
    ).claimed


def queue_claim_outcome(
    *,
    insight: Insight,
    count: int,
    worker: str,
    now: datetime,
    pull_request: str = "",
    nudge: bool = True,
) -> ClaimOutcome:
    """Pull: lease up to `count` queued agendas of `insight` in queue order (docs/design.md §6.3).

    Queue rows and their progress rows are locked with FOR UPDATE SKIP LOCKED, so rival
    pullers pass each other and an agenda being paused or aborted right now is left alone.
    The claimed (progress, execution) pairs come in queue order, each progress (state
    `executing`) with its agenda and the agenda's customer loaded.

    Also nudges a fill (docs/design.md §6.2), unless `nudge` is False, when the claim leaves
    the queue under half of `queue_size`, or finds it empty while the insight has ready agendas;
    the outcome says so (`nudge_wanted`), and whether a fill would find ready work for a claim
    that came up short or left the queue short (`fill_wanted`), for a pull that fills inline.

    On PostgreSQL the claim is one statement (`_queue_claim_postgresql`); elsewhere (the
    SQLite demo) it is the portable ORM form below, where a DELETE … RETURNING of the queue
    rows is the checked conditional write that keeps claims exclusive (SQLite ignores
    FOR UPDATE).
    """
    operations = None
    if connection.vendor == "postgresql":
        claimed, queued_before, ready, operations = _queue_claim_postgresql(
            insight=insight, count=count, worker=worker, now=now, pull_request=pull_request
        )
    else:
        claimed = _queue_claim_portable(
            insight=insight, count=count, worker=worker, now=now, pull_request=pull_request
        )
        queued_before = QueuedAgenda.objects.filter(insight_id=insight.pk).count() + len(claimed)
        ready = None  # read below, only when it matters
    left = queued_before - len(claimed)
    short = left * 2 < insight.queue_size if claimed else not queued_before
    # Fewer than asked: the queue held fewer rows this claim could take (rivals had the rest).
    wants_more = short or len(claimed) < count
    if wants_more and ready is None:
        ready = ReadyAgenda.objects.filter(insight_id=insight.pk).exists()
    outcome = ClaimOutcome(
        claimed=claimed,
        fill_wanted=bool(wants_more and ready and not insight.paused),  # paused: none taken
        nudge_wanted=bool(short and (claimed or ready)),
        operations=operations,
    )
    if nudge and outcome.nudge_wanted:
        fill_nudge([insight.pk])
    return outcome


_CLAIM_SQL = """
WITH picked AS (
    SELECT q.id AS queue_id, q.position, p.id AS progress_id, p.agenda_id, p.customer_id,
           p.link_id, p.cid, p.last_execution_number
    FROM {queue} q
    JOIN {progress} p ON p.agenda_id = q.agenda_id AND p.state = %(queued)s
    WHERE q.insight_id = %(insight)s
      AND NOT EXISTS (SELECT 1 FROM {insight} i WHERE i.id = %(insight)s AND i.paused)
    ORDER BY q.position
    LIMIT %(count)s
    FOR UPDATE OF q, p SKIP LOCKED
), claimed AS (
    DELETE FROM {queue} q USING picked WHERE q.id = picked.queue_id
    RETURNING q.id
), started AS (
    INSERT INTO {execution} AS e (id, agenda_id, customer_id, link_id, cid, number, insight_id,
        worker, pull_request, lease_token, lease_expires_at, started_at, diagnostics, created_at,
        updated_at)
    SELECT gen_random_uuid(), picked.agenda_id, picked.customer_id, picked.link_id, picked.cid,
        coalesce(picked.last_execution_number,
                 (SELECT max(x.number) FROM {execution} x WHERE x.agenda_id = picked.agenda_id),
                 0) + 1,
        %(insight)s, %(worker)s, %(pull_request)s, gen_random_uuid(), %(lease_expires_at)s,
        %(now)s,
        '[]'::jsonb, %(now)s, %(now)s
    FROM picked JOIN claimed ON claimed.id = picked.queue_id
    RETURNING e.*
), moved AS (
    UPDATE {progress} p
    SET state = %(executing)s, current_execution_id = started.id,
        last_execution_number = started.number, {entering},
        message = %(message)s, updated_at = %(now)s
    FROM started JOIN picked ON picked.agenda_id = started.agenda_id
    WHERE p.id = picked.progress_id
    RETURNING p.*
), counts AS (
    SELECT (SELECT count(*) FROM (SELECT 1 FROM {queue} WHERE insight_id = %(insight)s
                                  ORDER BY position LIMIT %(probe)s) AS probe) AS queued,
           (SELECT true FROM {ready} WHERE insight_id = %(insight)s
            ORDER BY added_at LIMIT 1) IS NOT NULL AS ready
)
SELECT picked.position, counts.queued, counts.ready, (SELECT count(*) FROM started),
       {operations}, {columns}
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
    progress rows as moved, the new executions, the agendas and their customers. The text is
    compacted to stay within the driver's cache of converted statements (core.statement_text)."""
    loaders = [
        RowLoader(AgendaProgress, "moved"),
        RowLoader(Execution, "started"),
        RowLoader(Agenda, "a"),
        RowLoader(Customer, "c"),
    ]
    quote = connection.ops.quote_name
    sql = _CLAIM_SQL.format(
        insight=quote(Insight._meta.db_table),
        queue=quote(QueuedAgenda._meta.db_table),
        progress=quote(AgendaProgress._meta.db_table),
        execution=quote(Execution._meta.db_table),
        ready=quote(ReadyAgenda._meta.db_table),
        agenda=quote(Agenda._meta.db_table),
        customer=quote(Customer._meta.db_table),
        columns=select_list(loaders),
        operations=pulled_operations_sql("moved.id"),
        entering=entry_sql(S.EXECUTING, table="p", now_parameter="now"),
    )
    return compact_statement(sql), loaders


def _queue_claim_postgresql(
    *, insight: Insight, count: int, worker: str, now: datetime, pull_request: str
) -> tuple[list[tuple[AgendaProgress, Execution]], int, bool, dict[object, list]]:
    """The claim as one data-modifying CTE: lock queue and progress rows together (FOR UPDATE
    OF q, p SKIP LOCKED), delete the queue rows, insert the executions numbered one more than
    each agenda's `last_execution_number` (no read of the executions, but for a row older than
    that column: a probe of them per claimed agenda was planned as a scan of every execution
    when the statement's generic plan was made on a small table), move the progress rows to
    executing, and return them with their executions, agendas and customers. The progress
    rows are updated by primary key, without testing their state again: `picked` holds their
    locks, taken on rows that were `queued`. Joined on agenda and state instead, the UPDATE
    was driven from the state index when the statistics were stale, reading every queued row
    (a claim of 10 with 4,000 queued: 12 ms, 6.8 ms by primary key; 1.4 ms either way with
    fresh statistics).
    The same statement counts the queue as it was before the claim
    (capped: enough to tell "under half full" afterwards) and whether the insight has ready
    agendas, both in their index's order, so that the plan reads this insight's rows by that
    index whatever the statistics say of the others (as `EXISTS`, the ready check read the
    whole ready set when another insight held nearly all of it: PostgreSQL drops an
    `EXISTS`'s ORDER BY and LIMIT), and reads the claimed agendas' operations
    (`pulled_operations_sql`: what the pull hands on of them). No one changes a queued
    agenda's operations (a report or an added operation needs its lease), so the statement's
    snapshot of them is current.

    Returns the claimed pairs in queue order, the queue length before the claim (capped),
    whether ready agendas exist, and the operations by progress id.
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
                "pull_request": pull_request,
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
    claimed, operations = [], {}
    for _, _, _, _, pulled_operations, *columns in found:
        progress, execution, agenda, customer = load_row(loaders, columns)
        operations[progress.pk] = pulled_operations_load(pulled_operations)
        agenda.customer = customer
        relate_one_way(progress, "agenda", agenda)
        progress.current_execution = execution
        callback_enqueue(progress, event=S.EXECUTING, now=now)
        claimed.append((progress, execution))
    return claimed, queued_before, ready, operations


def _queue_claim_portable(
    *, insight: Insight, count: int, worker: str, now: datetime, pull_request: str
) -> list[tuple[AgendaProgress, Execution]]:
    if Insight.objects.filter(pk=insight.pk, paused=True).exists():
        return []  # paused: nothing is handed out (PostgreSQL checks it in the claim itself)
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
    listed, parameters = among(wanted)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE id {listed} RETURNING agenda_id", parameters)
        claimed = {uuid.UUID(str(agenda_id)) for (agenda_id,) in cursor.fetchall()}
    ordered = [progresses[agenda_id] for _, agenda_id in rows if agenda_id in claimed]
    executions = executions_start(
        progresses=ordered, insight=insight, worker=worker, now=now, pull_request=pull_request
    )
    return list(zip(ordered, executions, strict=True))
