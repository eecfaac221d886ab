"""Scheduling services: fill, pull, report, promote, reclaim, time-out, reap (DESIGN §5, §7).

Every state change goes through agendas/states.py; this module decides *what* to move and
holds the locks and transactions around it. Unscoped queries here serve the timed processes
and the puller API only (STYLE rule 8).
"""

import functools
import hmac
import logging
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef
from django.http import Http404
from django.utils import timezone

from agendas import states
from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.rows import RowLoader, load_row
from agendas.states import TERMINAL, InvalidTransition, S
from agendas.validation import validate_operations
from resourcepools.models import Customer, Insight, Membership
from resourcepools.selectors import Principal, require_role
from scheduling import fairness, metrics
from scheduling.locks import database_is_postgresql, insight_fill_try_lock
from scheduling.models import InsightScheduleInfo, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.scheduling")
Outcome = Execution.Outcome
REPORT_OUTCOMES: dict[str, str] = {
    S.SUCCEEDED: Outcome.SUCCEEDED,
    S.FAILED: Outcome.FAILED,
    S.ABORTED: Outcome.ABORTED,
    S.PAUSED: Outcome.PAUSED,
}
MAX_PULL_COUNT = 100
MAX_WAIT_SECONDS = 20.0
MAX_BATCH_REPORTS = 100


# --- Fill (DESIGN §5.1) --------------------------------------------------------------------


@dataclass(frozen=True)
class FillResult:
    insight_id: object
    moved: int = 0
    room: int = 0
    skipped: bool = False  # another filler holds the insight's lock


@dataclass
class _Candidates:
    """Per customer, its best ready agendas in order (priority desc, then oldest)."""

    by_customer: dict[object, list[fairness.ReadyCandidate]] = field(default_factory=dict)
    limits: dict[object, int] = field(default_factory=dict)

    def exhausted(self, picked: dict[object, int]) -> list[object]:
        """Customers whose every row read was picked, and who may have more we never read."""
        return [
            customer_id
            for customer_id, rows in self.by_customer.items()
            if rows
            and len(rows) >= self.limits.get(customer_id, 0)
            and picked.get(customer_id, 0) >= len(rows)
        ]


def insight_fill(*, insight_id: object, now: datetime | None = None) -> FillResult:
    """Move up to `room` ready agendas of the insight into its queue, fairly, in one transaction.

    Takes the insight's advisory try-lock (a concurrent filler returns `skipped`), locks its
    InsightScheduleInfo row and the moved progress rows. Reads O(customers with ready work +
    room) ready rows, never a customer's whole backlog.
    """
    now = now or timezone.now()
    with transaction.atomic():
        if not insight_fill_try_lock(insight_id):
            return FillResult(insight_id=insight_id, skipped=True)
        insight = Insight.objects.filter(pk=insight_id).first()
        if insight is None:
            return FillResult(insight_id=insight_id)  # deleted since the nudge
        info, _ = InsightScheduleInfo.objects.select_for_update().get_or_create(insight=insight)
        room = _fill_room(insight)
        if room <= 0:
            return FillResult(insight_id=insight_id, room=max(room, 0))
        customer_ids = _customers_with_ready_work(insight.pk)
        if not customer_ids:
            return FillResult(insight_id=insight_id, room=room)
        customers = {
            pk: (weight, cap)
            for pk, weight, cap in Customer.objects.filter(pk__in=customer_ids).values_list(
                "pk", "weight", "max_executing"
            )
        }
        allowance = _cap_allowance(
            {pk: cap for pk, (_, cap) in customers.items() if cap is not None}
        )
        # What each customer may take now: the room, less for one near its max_executing cap.
        takes = {pk: max(0, min(room, allowance.get(pk, room))) for pk in customer_ids}
        # Read about room/customers rows each. While the picker takes every row read of some
        # customer that has more, its choice may be wrong (fifo: that customer's next row may
        # be older than a pick; weighted: it may deserve more): re-read just those customers
        # with twice the limit and pick again. Rows read stay within a small multiple of
        # customers + room, however long any backlog is.
        share = math.ceil(room / len(customer_ids)) + 1
        candidates = _Candidates(by_customer={pk: [] for pk in customer_ids})
        _read_candidates(insight.pk, candidates, {pk: min(share, k) for pk, k in takes.items()})
        weights = {str(pk): customers[pk][0] for pk in customer_ids if pk in customers}
        while True:
            picks, state = _pick(insight, info, candidates, room, weights)
            if len(picks) >= room and insight.scheduling_algorithm == Insight.Algorithm.ROUND_ROBIN:
                break  # one per customer per round: nobody can be short-changed at full room
            emptied = candidates.exhausted(_count_by_customer(picks))
            more = {
                pk: min(takes[pk], candidates.limits[pk] * 2)
                for pk in emptied
                if takes[pk] > candidates.limits[pk]
            }
            if not more:
                break
            _read_candidates(insight.pk, candidates, more)
        moved = states.progress_queue_many(
            insight_id=insight.pk,
            entries=[(pick.agenda_id, pick.customer_id) for pick in picks],
            first_position=info.next_position,
            now=now,
        )
        info.next_position += len(moved)
        info.pending_customer_ids = state.get("pending_customer_ids", info.pending_customer_ids)
        info.deficits = state.get("deficits", info.deficits)
        info.last_fill_at = now
        info.last_fill_count = len(moved)
        info.save(
            update_fields=[
                "next_position",
                "pending_customer_ids",
                "deficits",
                "last_fill_at",
                "last_fill_count",
            ]
        )
    if moved:
        metrics.FILLS.labels(insight.name).inc()
        metrics.FILLED_AGENDAS.labels(insight.name).inc(len(moved))
    return FillResult(insight_id=insight_id, moved=len(moved), room=room)


def insights_to_fill() -> list[object]:
    """Ids of the insights whose queue has room and that have ready work (the periodic fill)."""
    return list(
        Insight.objects.annotate(queued=Count("queued_agendas"))
        .filter(queued__lt=F("queue_size"))
        .filter(Exists(ReadyAgenda.objects.filter(insight_id=OuterRef("pk"))))
        .values_list("pk", flat=True)
    )


def insights_fill(*, now: datetime | None = None) -> int:
    """Fill every insight that has room and ready work; return the agendas moved."""
    return sum(insight_fill(insight_id=pk, now=now).moved for pk in insights_to_fill())


def _fill_room(insight: Insight) -> int:
    queued = QueuedAgenda.objects.filter(insight_id=insight.pk).count()
    room = insight.queue_size - queued
    if insight.execution_limit is not None:
        executing = Execution.objects.filter(insight_id=insight.pk, outcome__isnull=True).count()
        room = min(room, insight.execution_limit - executing - queued)
    return room


def _cap_allowance(caps: dict[object, int]) -> dict[object, int]:
    """For customers with `max_executing`, how many more they may have queued or executing."""
    if not caps:
        return {}
    queued = dict(
        QueuedAgenda.objects.filter(customer_id__in=list(caps))
        .values_list("customer_id")
        .annotate(n=Count("pk"))
        .values_list("customer_id", "n")
        .order_by()
    )
    executing = dict(
        Execution.objects.filter(customer_id__in=list(caps), outcome__isnull=True)
        .values_list("customer_id")
        .annotate(n=Count("pk"))
        .values_list("customer_id", "n")
        .order_by()
    )
    return {pk: cap - queued.get(pk, 0) - executing.get(pk, 0) for pk, cap in caps.items()}


# Skip scan: one index probe per distinct customer of the insight, instead of reading every
# ready row (DISTINCT) or ranking them all (window function). DESIGN §5.1 has the figures.
_SKIP_SCAN_SQL = """
WITH RECURSIVE customers(customer_id) AS (
    (SELECT customer_id FROM {table} WHERE insight_id = %s ORDER BY customer_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.customer_id FROM {table} r
            WHERE r.insight_id = %s AND r.customer_id > c.customer_id
            ORDER BY r.customer_id LIMIT 1)
    FROM customers c WHERE c.customer_id IS NOT NULL
)
SELECT customer_id FROM customers WHERE customer_id IS NOT NULL
"""
# Each customer's best k rows, read straight off the (insight, customer, -priority, added_at)
# index: k rows per customer, however long its backlog.
_LATERAL_SQL = """
SELECT c.customer_id, r.agenda_id, r.priority, r.added_at
FROM unnest(%s::uuid[], %s::int[]) WITH ORDINALITY AS c(customer_id, k, ord)
CROSS JOIN LATERAL (
    SELECT agenda_id, priority, added_at FROM {table}
    WHERE insight_id = %s AND customer_id = c.customer_id
    ORDER BY priority DESC, added_at
    LIMIT c.k
) r
ORDER BY c.ord, r.priority DESC, r.added_at
"""


def _customers_with_ready_work(insight_id: object) -> list[object]:
    table = connection.ops.quote_name(ReadyAgenda._meta.db_table)
    if database_is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(_SKIP_SCAN_SQL.format(table=table), [insight_id, insight_id])
            return [row[0] for row in cursor.fetchall()]
    return list(
        ReadyAgenda.objects.filter(insight_id=insight_id)
        .order_by("customer_id")
        .values_list("customer_id", flat=True)
        .distinct()
    )


def _read_candidates(
    insight_id: object, candidates: _Candidates, limits: dict[object, int]
) -> None:
    candidates.limits.update(limits)
    limits = {pk: k for pk, k in limits.items() if k > 0}
    if not limits:
        return
    rows: dict[object, list[fairness.ReadyCandidate]] = {pk: [] for pk in limits}
    if database_is_postgresql():
        table = connection.ops.quote_name(ReadyAgenda._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                _LATERAL_SQL.format(table=table),
                [list(limits), list(limits.values()), insight_id],
            )
            for customer_id, agenda_id, priority, added_at in cursor.fetchall():
                rows[customer_id].append(_candidate(agenda_id, customer_id, priority, added_at))
    else:
        for customer_id, k in limits.items():
            for agenda_id, priority, added_at in (
                ReadyAgenda.objects.filter(insight_id=insight_id, customer_id=customer_id)
                .order_by("-priority", "added_at")
                .values_list("agenda_id", "priority", "added_at")[:k]
            ):
                rows[customer_id].append(_candidate(agenda_id, customer_id, priority, added_at))
    candidates.by_customer.update(rows)


def _candidate(
    agenda_id: object, customer_id: object, priority: int, added_at: datetime
) -> fairness.ReadyCandidate:
    return fairness.ReadyCandidate(
        agenda_id=agenda_id, customer_id=customer_id, priority=priority, added_at=added_at
    )


def _pick(
    insight: Insight,
    info: InsightScheduleInfo,
    candidates: _Candidates,
    room: int,
    weights: dict[str, int],
) -> tuple[list[fairness.ReadyCandidate], dict]:
    return fairness.pick(
        insight.scheduling_algorithm,
        candidates.by_customer,
        room,
        state={"pending_customer_ids": info.pending_customer_ids, "deficits": info.deficits},
        weights=weights,
    )


def _count_by_customer(picks: list[fairness.ReadyCandidate]) -> dict[object, int]:
    counts: dict[object, int] = {}
    for pick in picks:
        counts[pick.customer_id] = counts.get(pick.customer_id, 0) + 1
    return counts


# --- Pull (DESIGN §5.3) --------------------------------------------------------------------


@dataclass(frozen=True)
class PulledAgenda:
    """One leased agenda: the request, the progress a retry resumes from, and the lease."""

    agenda: Agenda
    progress: AgendaProgress
    operations: list[OperationProgress]
    execution: Execution

    @property
    def prior_progress(self) -> dict:
        """The progress a retry resumes from (DESIGN §5.3)."""
        return {
            "state": self.progress.state,
            "attempts_completed": self.progress.attempts_completed,
            "percent_complete": self.progress.percent_complete,
            "message": self.progress.message,
            "operations": self.operations,
        }

    @property
    def operations_to_run(self) -> list[dict]:
        """The submitted operations, then those generated by earlier attempts (DESIGN §3)."""
        generated = [op.generated_definition for op in self.operations if op.is_generated]
        return [*self.agenda.operations, *generated]


def insight_pull(
    *,
    principal: Principal | None,
    insight: Insight,
    worker: str = "",
    count: int = 1,
    wait_seconds: float = 0.0,
) -> list[PulledAgenda]:
    """Lease up to `count` queued agendas of `insight` to `worker`, long-polling `wait_seconds`.

    Each check is one short transaction (queue + progress rows locked with SKIP LOCKED). The
    wait happens outside any transaction and without a database connection: it is closed
    between checks, so a thousand idle pullers hold no connections.
    """
    require_role(principal, insight.resource_pool.owner_id, Membership.Role.WORKER)
    if not 1 <= count <= MAX_PULL_COUNT:
        raise ValidationError({"count": [f"Must be between 1 and {MAX_PULL_COUNT}."]})
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise ValidationError({"wait_seconds": [f"Must be between 0 and {MAX_WAIT_SECONDS:g}."]})
    deadline = time.monotonic() + wait_seconds
    pause = float(getattr(settings, "POP_PULL_POLL_SECONDS", 0.05))
    while True:
        pulled = insight_pull_once(insight=insight, worker=worker, count=count)
        left = deadline - time.monotonic()
        if pulled or left <= 0:
            metrics.PULLS.labels(insight.name).inc()
            return pulled
        if not connection.in_atomic_block:
            connection.close()
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.5)


def insight_pull_once(*, insight: Insight, worker: str, count: int) -> list[PulledAgenda]:
    """One claim: lease up to `count` agendas in queue order, then read their operations.

    The claim (`states.queue_claim`) locks the claimed queue and progress rows, and nudges a
    fill when it leaves the queue under half full or finds it empty while work is ready.
    """
    started = time.perf_counter()
    now = timezone.now()
    with transaction.atomic():
        claimed = states.queue_claim(insight=insight, count=count, worker=worker, now=now)
    if not claimed:
        return []
    operations: dict[object, list[OperationProgress]] = {}
    for operation in OperationProgress.objects.filter(
        agenda_progress_id__in=[progress.pk for progress, _ in claimed]
    ).order_by("agenda_progress_id", "position"):
        operations.setdefault(operation.agenda_progress_id, []).append(operation)
    metrics.PULL_LATENCY.labels(insight.name).observe(time.perf_counter() - started)
    metrics.PULLED_AGENDAS.labels(insight.name).inc(len(claimed))
    return [
        PulledAgenda(
            agenda=progress.agenda,
            progress=progress,
            operations=operations.get(progress.pk, []),
            execution=execution,
        )
        for progress, execution in claimed
    ]


# --- Report (DESIGN §5.4) ------------------------------------------------------------------


@dataclass(frozen=True)
class ReportAnswer:
    """What the worker is told: stop (abort), pause, and until when its lease runs."""

    abort: bool
    pause: bool
    lease_expires_at: datetime | None
    state: str


@dataclass(frozen=True)
class BatchItemResult:
    execution: object
    status: int
    answer: ReportAnswer | None = None
    detail: str = ""
    errors: dict | None = None
    current_state: str | None = None


def execution_report(
    *,
    execution_id: object,
    lease_token: object,
    percent_complete: float | None = None,
    message: str | None = None,
    operations: list[dict] | None = None,
    state: str | None = None,
    diagnostics: list | None = None,
    now: datetime | None = None,
) -> ReportAnswer:
    """Apply one worker report in one transaction: operations, percent, lease, outcome.

    Locks the agenda's progress row, then the execution row. A wrong or missing lease token
    is 403, an execution that is no longer current is 409, an unknown operation is 400; in
    every refused case nothing changes.
    """
    with transaction.atomic():
        return _execution_report(
            execution_id=execution_id,
            lease_token=lease_token,
            percent_complete=percent_complete,
            message=message,
            operations=operations,
            state=state,
            diagnostics=diagnostics,
            now=now or timezone.now(),
        )


def execution_report_batch(
    *, reports: list[dict], now: datetime | None = None
) -> list[BatchItemResult]:
    """Apply up to 100 reports in one transaction; results come back in the order given.

    Every item's execution and progress rows are locked in one statement, in execution-id
    order (a fixed lock order between concurrent batches), and checked before anything is
    written, so a refused item (400/403/404/409) is answered untouched and never fails the
    others. Progress reports and plain `succeeded` reports are then written together, a few
    statements per batch; the rest (failures, pauses, aborts, diagnostics, an execution or
    agenda named twice) go one by one, in execution-id order, each in its own savepoint.
    """
    if len(reports) > MAX_BATCH_REPORTS:
        raise ValidationError({"reports": [f"At most {MAX_BATCH_REPORTS} reports per call."]})
    now = now or timezone.now()
    results: dict[int, BatchItemResult] = {}
    order = sorted(range(len(reports)), key=lambda index: str(reports[index].get("execution")))
    with transaction.atomic():
        if database_is_postgresql():
            results = _report_batch_together(reports, order, now=now)
        for index in order:
            if index in results:
                continue
            item = dict(reports[index])
            execution_id = item.pop("execution", None)
            lease_token = item.pop("lease_token", None)
            try:
                with transaction.atomic():
                    answer = _execution_report(
                        execution_id=execution_id, lease_token=lease_token, now=now, **item
                    )
            except (ValidationError, PermissionDenied, Http404, InvalidTransition) as error:
                results[index] = _refused(execution_id, error)
            else:
                results[index] = BatchItemResult(execution_id, 200, answer=answer)
    return [results[index] for index in range(len(reports))]


def _refused(execution_id: object, error: Exception) -> BatchItemResult:
    if isinstance(error, ValidationError):
        return BatchItemResult(execution_id, 400, detail="invalid report", errors=_errors_of(error))
    if isinstance(error, PermissionDenied):
        return BatchItemResult(execution_id, 403, detail=str(error))
    if isinstance(error, Http404):
        return BatchItemResult(execution_id, 404, detail=str(error))
    assert isinstance(error, InvalidTransition)
    return BatchItemResult(execution_id, 409, detail=str(error), current_state=error.current_state)


_REPORT_FIELDS = frozenset(
    {
        "execution",
        "lease_token",
        "percent_complete",
        "message",
        "operations",
        "state",
        "diagnostics",
    }
)


@dataclass
class _Together:
    """One batch item checked and bound for the set-based write."""

    index: int
    report: dict
    progress: AgendaProgress
    execution: Execution
    operations: dict[str, OperationProgress]
    items: list[dict]


def _report_batch_together(
    reports: list[dict], order: list[int], *, now: datetime
) -> dict[int, BatchItemResult]:
    """Check every item against rows locked in one statement; write the common ones together.

    Returns the results of the items answered here (refused or written); the caller applies
    the others one by one. An item is answered here with exactly the result, and written with
    exactly the rows, the one-by-one path would give it.
    """
    results: dict[int, BatchItemResult] = {}
    wanted: dict[int, object] = {}
    for index in order:
        report = reports[index]
        if not _REPORT_FIELDS.issuperset(report):
            continue  # the one-by-one path fails on it as it always did
        execution_id = report.get("execution")
        state = report.get("state")
        try:
            if state is not None and state not in REPORT_OUTCOMES:
                raise ValidationError({"state": [f"Must be one of {sorted(REPORT_OUTCOMES)}."]})
            wanted[index] = Execution._meta.pk.to_python(execution_id)
        except ValidationError as error:
            results[index] = _refused(execution_id, error)
    locked = _lock_current([pk for pk in wanted.values() if pk is not None])
    # Two items for one execution or one agenda depend on each other: one by one, in order.
    agendas = Counter(locked[pk][0].agenda_id for pk in wanted.values() if pk in locked)
    shared = {agenda_id for agenda_id, items in agendas.items() if items > 1}
    checked: list[tuple[int, AgendaProgress, Execution]] = []
    for index, pk in wanted.items():
        report = reports[index]
        progress, execution = locked.get(pk, (None, None))
        if progress is not None and progress.agenda_id in shared:
            continue
        try:
            _check_current(report.get("execution"), report.get("lease_token"), progress, execution)
        except (PermissionDenied, Http404, InvalidTransition) as error:
            results[index] = _refused(report.get("execution"), error)
        else:
            checked.append((index, progress, execution))
    operations = _operations_of(
        [progress for index, progress, _ in checked if reports[index].get("operations")]
    )
    together: list[_Together] = []
    for index, progress, execution in checked:
        report = reports[index]
        try:
            by_name, items = _resolve_operations(
                operations.get(progress.pk, {}), report.get("operations") or []
            )
        except ValidationError as error:
            results[index] = _refused(report.get("execution"), error)
            continue
        if report.get("state") in (None, S.SUCCEEDED) and not report.get("diagnostics"):
            together.append(_Together(index, report, progress, execution, by_name, items))
    results.update(_write_together(together, now=now))
    return results


def _write_together(together: list[_Together], *, now: datetime) -> dict[int, BatchItemResult]:
    """`_execution_report` for many progress and plain `succeeded` reports, set-based."""
    if not together:
        return {}
    states.operations_apply_reports(
        [(entry.operations, entry.items) for entry in together if entry.items], now=now
    )
    renewed, succeeded = [], []
    for entry in together:
        progress, execution, report = entry.progress, entry.execution, entry.report
        changed = _report_progress_fields(
            progress,
            entry.operations,
            entry.items,
            report.get("percent_complete"),
            report.get("message"),
            [],
        )
        execution.last_report_at = now
        if report.get("state") is None:
            execution.lease_expires_at = now + timedelta(
                seconds=progress.agenda.insight.lease_seconds
            )
            renewed.append((progress, execution, bool(changed)))
        else:
            reason = report.get("message") or f"worker reported {S.SUCCEEDED}"
            succeeded.append((progress, execution, reason))
    states.executions_report_many(renewed=renewed, succeeded=succeeded, now=now)
    results = {}
    for entry in together:
        execution_id = entry.report.get("execution")
        if entry.report.get("state") is None:
            metrics.REPORTS.labels("progress").inc()
            answer = ReportAnswer(
                abort=entry.progress.abort_requested,
                pause=entry.progress.pause_requested,
                lease_expires_at=entry.execution.lease_expires_at,
                state=entry.progress.state,
            )
        else:
            metrics.REPORTS.labels(S.SUCCEEDED).inc()
            metrics.OUTCOMES.labels(Outcome.SUCCEEDED).inc()
            answer = ReportAnswer(
                abort=False, pause=False, lease_expires_at=None, state=entry.progress.state
            )
        results[entry.index] = BatchItemResult(execution_id, 200, answer=answer)
    return results


def _errors_of(error: ValidationError) -> dict:
    if hasattr(error, "error_dict"):
        return {key: [str(m) for m in messages] for key, messages in error.message_dict.items()}
    return {"non_field_errors": [str(message) for message in error.messages]}


# What a report reads besides the locked progress and execution rows: the lease length, the
# retry policy, and what the outbox row and the completion line carry. Not locked.
_REPORT_AGENDA_FIELDS = frozenset(
    {
        "id",
        "customer_id",
        "insight_id",
        "link_id",
        "cid",
        "external_id",
        "callback_url",
        "created_at",
        "priority",
        "max_attempts",
        "retry_delay_seconds",
    }
)
_REPORT_CUSTOMER_FIELDS = frozenset({"id", "slug", "callback_url"})
_REPORT_INSIGHT_FIELDS = frozenset({"id", "lease_seconds"})


def _lock_current(execution_ids: list) -> dict[object, tuple[AgendaProgress, Execution]]:
    """Lock executions and their agendas' progress rows in one statement, in execution-id order.

    Returns {execution id: (progress, execution)}; each progress carries its agenda with the
    agenda's customer and insight, loaded with only the columns a report needs. Progress rows
    are locked before execution rows, as everywhere else.
    """
    if not execution_ids:
        return {}
    loaders = _report_loaders(connection.vendor)
    table = {
        model: connection.ops.quote_name(model._meta.db_table)
        for model in (AgendaProgress, Execution, Agenda, Customer, Insight)
    }
    lock = ""
    if connection.features.has_select_for_update_of:
        lock = "FOR UPDATE OF p, e"
    elif connection.features.has_select_for_update:
        lock = "FOR UPDATE"
    prepare = Execution._meta.pk.get_db_prep_value
    sql = (
        f"SELECT {', '.join(column for loader in loaders for column in loader.columns)} "
        f"FROM {table[Execution]} e "
        f"JOIN {table[AgendaProgress]} p ON p.agenda_id = e.agenda_id "
        f"JOIN {table[Agenda]} a ON a.id = e.agenda_id "
        f"JOIN {table[Customer]} c ON c.id = a.customer_id "
        f"JOIN {table[Insight]} i ON i.id = a.insight_id "
        f"WHERE e.id IN ({', '.join(['%s'] * len(execution_ids))}) ORDER BY e.id {lock}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [prepare(pk, connection) for pk in execution_ids])
        rows = cursor.fetchall()
    locked = {}
    for row in rows:
        progress, execution, agenda, customer, insight = load_row(loaders, row)
        agenda.customer, agenda.insight = customer, insight
        progress.agenda = agenda
        locked[execution.pk] = (progress, execution)
    return locked


@functools.cache
def _report_loaders(vendor: str) -> list[RowLoader]:
    # Built once per process and database vendor: converters are looked up, not per report.
    return [
        RowLoader(AgendaProgress, "p"),
        RowLoader(Execution, "e"),
        RowLoader(Agenda, "a", _REPORT_AGENDA_FIELDS),
        RowLoader(Customer, "c", _REPORT_CUSTOMER_FIELDS),
        RowLoader(Insight, "i", _REPORT_INSIGHT_FIELDS),
    ]


def _current_execution(
    execution_id: object, lease_token: object
) -> tuple[AgendaProgress, Execution]:
    """Lock and return the progress and execution a lease token speaks for, or refuse."""
    pk = Execution._meta.pk.to_python(execution_id)
    progress, execution = _lock_current([pk]).get(pk, (None, None)) if pk else (None, None)
    _check_current(execution_id, lease_token, progress, execution)
    return progress, execution


def _check_current(
    execution_id: object,
    lease_token: object,
    progress: AgendaProgress | None,
    execution: Execution | None,
) -> None:
    """Refuse a report for a missing execution (404), with a wrong lease (403), or for an
    execution that is no longer its agenda's current one (409)."""
    if execution is None:
        raise Http404(f"No execution {execution_id}.")
    if not lease_token or not hmac.compare_digest(
        str(execution.lease_token), str(lease_token).strip()
    ):
        raise PermissionDenied("The X-POP-Lease token does not match this execution.")
    if (
        execution.outcome is not None
        or progress.current_execution_id != execution.pk
        or progress.state != S.EXECUTING
    ):
        ended = f"ended ({execution.outcome})" if execution.outcome else "not current"
        raise InvalidTransition(
            f"Execution {execution.pk} is {ended}; agenda {progress.agenda_id} is "
            f"{progress.state}. Stop working on it.",
            current_state=progress.state,
        )


def _operations_of(progresses: list[AgendaProgress]) -> dict[object, dict[str, OperationProgress]]:
    """The operations of each agenda, by progress id and then name, in one query."""
    if not progresses:
        return {}
    found: dict[object, dict[str, OperationProgress]] = {}
    for operation in OperationProgress.objects.filter(agenda_progress__in=progresses):
        found.setdefault(operation.agenda_progress_id, {})[operation.name] = operation
    return found


def _operations_by_name(
    progress: AgendaProgress, items: list[dict]
) -> tuple[dict[str, OperationProgress], list[dict]]:
    """The agenda's operations keyed by name, and the items with names resolved; 400 if unknown."""
    if not items:
        return {}, []
    return _resolve_operations(_operations_of([progress]).get(progress.pk, {}), items)


def _resolve_operations(
    operations: dict[str, OperationProgress], items: list[dict]
) -> tuple[dict[str, OperationProgress], list[dict]]:
    if not items:
        return {}, []
    by_lower = {name.lower(): name for name in operations}
    resolved, errors = [], {}
    for index, item in enumerate(items):
        name = by_lower.get(str(item.get("name", "")).lower())
        if name is None:
            errors[f"operations.{index}.name"] = [
                f"Unknown operation {item.get('name')!r}: not in the agenda and not added "
                "through executions/{id}/operations/."
            ]
            continue
        resolved.append({**item, "name": name})
    if errors:
        raise ValidationError(errors)
    return operations, resolved


def _report_progress_fields(
    progress: AgendaProgress,
    operations: dict[str, OperationProgress],
    items: list[dict],
    percent_complete: float | None,
    message: str | None,
    entries: list[dict],
) -> set[str]:
    """Set a report's percent, message and diagnostics on `progress`; return the fields set."""
    fields = set()
    if items:
        progress.percent_complete = states.percent_rollup(operations.values())
        fields.add("percent_complete")
    elif percent_complete is not None:
        progress.percent_complete = round(min(100.0, max(0.0, float(percent_complete))), 2)
        fields.add("percent_complete")
    if message is not None:
        progress.message = message
        fields.add("message")
    if entries:
        progress.diagnostics = [*progress.diagnostics, *entries]
        fields.add("diagnostics")
    return fields


def _execution_report(
    *,
    execution_id: object,
    lease_token: object,
    now: datetime,
    percent_complete: float | None = None,
    message: str | None = None,
    operations: list[dict] | None = None,
    state: str | None = None,
    diagnostics: list | None = None,
) -> ReportAnswer:
    if state is not None and state not in REPORT_OUTCOMES:
        raise ValidationError({"state": [f"Must be one of {sorted(REPORT_OUTCOMES)}."]})
    progress, execution = _current_execution(execution_id, lease_token)
    by_name, items = _operations_by_name(progress, operations or [])
    if items:
        states.operations_apply_report(by_name, items, now=now)
    entries = [_diagnostic(entry, now=now) for entry in diagnostics or []]
    fields = _report_progress_fields(progress, by_name, items, percent_complete, message, entries)
    execution.last_report_at = now
    if state is None:
        if fields:
            progress.save(update_fields=sorted({*fields, "updated_at"}))
        execution.lease_expires_at = now + timedelta(seconds=progress.agenda.insight.lease_seconds)
        execution.save(update_fields=["last_report_at", "lease_expires_at", "updated_at"])
        metrics.REPORTS.labels("progress").inc()
        return ReportAnswer(
            abort=progress.abort_requested,
            pause=progress.pause_requested,
            lease_expires_at=execution.lease_expires_at,
            state=progress.state,
        )
    outcome = REPORT_OUTCOMES[state]
    reason = message or _last_message(entries) or f"worker reported {state}"
    states.execution_end(
        progress,
        execution,
        outcome,
        now=now,
        message=reason,
        progress_fields=fields,
        execution_fields=["last_report_at"],
    )
    metrics.REPORTS.labels(state).inc()
    metrics.OUTCOMES.labels(outcome).inc()
    return ReportAnswer(abort=False, pause=False, lease_expires_at=None, state=progress.state)


def _diagnostic(entry: object, *, now: datetime) -> dict:
    if isinstance(entry, dict):
        return {
            "time": entry.get("time") or now.isoformat(),
            "message": str(entry.get("message", "")),
            "code": str(entry.get("code", "")),
            "detail": entry.get("detail"),
        }
    return states.diagnostic(str(entry), now=now)


def _last_message(entries: list[dict]) -> str:
    return next((entry["message"] for entry in reversed(entries) if entry["message"]), "")


def execution_add_operations(
    *,
    execution_id: object,
    lease_token: object,
    operations: list[dict],
    now: datetime | None = None,
) -> list[OperationProgress]:
    """Append generated operations to the running agenda (POP updateAgenda); renews the lease.

    Each operation is checked with the rules of a submitted one (DESIGN §4.2) against the
    agenda's operations plus those generated before: names new to the agenda
    (case-insensitively), `depends_on` and references naming known operations, no cycles.
    Any problem is a 400 by field path (`operations.<i>.…`, indexes of `operations`) and
    nothing is written. Its whole definition is kept, so a retry's pull hands it to the next
    worker (DESIGN §3). Repeating an already generated operation with the same definition is
    accepted and changes nothing, so a retried call is harmless. Locks the progress and
    execution rows.
    """
    now = now or timezone.now()
    with transaction.atomic():
        progress, execution = _current_execution(execution_id, lease_token)
        new, repeated = _generated_operations_check(progress, operations)
        added = states.operations_append(progress, new, now=now)
        execution.last_report_at = now
        execution.lease_expires_at = now + timedelta(seconds=progress.agenda.insight.lease_seconds)
        execution.save(update_fields=["last_report_at", "lease_expires_at", "updated_at"])
    return [*repeated, *added]


def _generated_operations_check(
    progress: AgendaProgress, operations: list[dict]
) -> tuple[list[dict], list[OperationProgress]]:
    """Split appended operations into new definitions and repeats of generated ones; 400 with
    every problem by field path otherwise."""
    if not isinstance(operations, list) or not operations:
        raise ValidationError({"operations": ["At least one operation is required."]})
    rows = list(OperationProgress.objects.filter(agenda_progress=progress).order_by("position"))
    existing = {row.name.lower(): row for row in rows}
    known = [
        *progress.agenda.operations,
        *(row.generated_definition for row in rows if row.is_generated),
    ]
    errors: dict[str, list[str]] = {}
    new: list[dict] = []
    # Index in the combined list checked below -> index in the request.
    origin: dict[int, int] = {}
    repeated: list[OperationProgress] = []
    first_index: dict[str, int] = {}
    for index, item in enumerate(operations):
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name.strip():
            earlier = existing.get(name.lower())
            if earlier is not None:
                if earlier.generated_definition == item:
                    repeated.append(earlier)
                else:
                    errors[f"operations.{index}.name"] = [
                        f"The agenda already has an operation named '{earlier.name}'"
                        + (" (generated with another definition)." if earlier.is_generated else ".")
                    ]
                continue
            first = first_index.setdefault(name.lower(), index)
            if first != index:
                errors[f"operations.{index}.name"] = [
                    f"Operation name '{name}' is already used by operations.{first}.name "
                    "(names are unique case-insensitively)."
                ]
                continue
        origin[len(known) + len(new)] = index
        new.append(dict(item) if isinstance(item, dict) else item)
    problems = validate_operations([*known, *new]) if new else {}
    for path, messages in problems.items():
        head, _, rest = path.partition(".")
        number, _, tail = rest.partition(".")
        if head == "operations" and number.isdigit():
            if int(number) not in origin:
                continue  # an operation already in the agenda: checked when it came
            path = ".".join(filter(None, ["operations", str(origin[int(number)]), tail]))
        errors.setdefault(path, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    return new, repeated


# --- Timed processes (DESIGN §7) -----------------------------------------------------------


def agendas_promote(*, now: datetime | None = None, batch_size: int = 1000) -> int:
    """Move pending agendas whose `run_after` passed to ready, in batches; return the count."""
    now = now or timezone.now()
    total = 0
    while True:
        with transaction.atomic():
            promoted = sum(states.progress_promote_due(now=now, limit=batch_size).values())
        total += promoted
        if promoted < batch_size:
            return total


def executions_reclaim(*, now: datetime | None = None, limit: int = 1000) -> int:
    """End executions whose lease expired: retry policy, or `aborted` when an abort was asked.

    One short transaction per execution; a progress row locked by an in-flight report is
    skipped (SKIP LOCKED) and looked at again next run, so two reclaimers never collide.
    """
    now = now or timezone.now()
    expired = list(
        Execution.objects.filter(outcome__isnull=True, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", "agenda_id")[:limit]
    )
    reclaimed = 0
    for execution_id, agenda_id in expired:
        with transaction.atomic():
            locked = _lock_open_execution(execution_id, agenda_id)
            if locked is None:
                continue
            progress, execution = locked
            if execution.lease_expires_at >= now:
                continue  # renewed by a report meanwhile
            since = execution.last_report_at or execution.started_at
            reason = (
                f"lease expired: no report from worker {execution.worker or '(unnamed)'} "
                f"since {since.isoformat()}"
            )
            _end_abandoned(
                progress, execution, Outcome.RECLAIMED, reason, code="lease_expired", now=now
            )
            reclaimed += 1
    if reclaimed:
        metrics.RECLAIMS.inc(reclaimed)
        logger.info("reclaimed %d execution(s) with expired leases", reclaimed)
    return reclaimed


def executions_time_out(*, now: datetime | None = None, limit: int = 1000) -> int:
    """End executions running longer than their insight's `max_execution_seconds`, even while
    heartbeating (`timed_out` → retry policy). One short transaction per execution."""
    now = now or timezone.now()
    timed_out = 0
    for insight_id, max_seconds in Insight.objects.values_list("pk", "max_execution_seconds"):
        cutoff = now - timedelta(seconds=max_seconds)
        overdue = list(
            Execution.objects.filter(
                insight_id=insight_id, outcome__isnull=True, started_at__lt=cutoff
            )
            .order_by("started_at")
            .values_list("pk", "agenda_id")[:limit]
        )
        for execution_id, agenda_id in overdue:
            with transaction.atomic():
                locked = _lock_open_execution(execution_id, agenda_id)
                if locked is None:
                    continue
                progress, execution = locked
                reason = (
                    f"timed out: running since {execution.started_at.isoformat()}, longer than "
                    f"the insight's max_execution_seconds={max_seconds}"
                )
                _end_abandoned(
                    progress, execution, Outcome.TIMED_OUT, reason, code="timed_out", now=now
                )
                timed_out += 1
    if timed_out:
        metrics.TIMEOUTS.inc(timed_out)
        logger.info("timed out %d execution(s)", timed_out)
    return timed_out


def _lock_open_execution(
    execution_id: object, agenda_id: object
) -> tuple[AgendaProgress, Execution] | None:
    progress = (
        AgendaProgress.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("agenda", "agenda__customer")
        .filter(agenda_id=agenda_id)
        .first()
    )
    if progress is None:
        return None
    execution = Execution.objects.select_for_update().filter(pk=execution_id).first()
    if execution is None or execution.outcome is not None:
        return None
    return progress, execution


def _end_abandoned(
    progress: AgendaProgress,
    execution: Execution,
    outcome: str,
    reason: str,
    *,
    code: str,
    now: datetime,
) -> None:
    entry = states.diagnostic(reason, code=code, detail={"execution": str(execution.pk)}, now=now)
    if progress.current_execution_id != execution.pk or progress.state != S.EXECUTING:
        states.execution_close(execution, outcome, now=now, diagnostics=[entry])
        return
    if not progress.abort_requested:
        states.operations_fail_running(progress, message=reason, now=now)
    states.execution_end(progress, execution, outcome, now=now, message=reason, diagnostics=[entry])
    metrics.OUTCOMES.labels(outcome).inc()


def agendas_reap(*, now: datetime | None = None, batch_size: int | None = None) -> int:
    """Delete terminal agendas older than their customer's `data_ttl_days`, with progress,
    operations, executions and callback rows, in batches of ≤ batch_size; never a
    non-terminal agenda. Locks each batch's progress rows (SKIP LOCKED) before deleting."""
    now = now or timezone.now()
    batch_size = min(batch_size or int(getattr(settings, "POP_REAP_BATCH_SIZE", 1000)), 1000)
    reaped = 0
    for customer_id, ttl_days in Customer.objects.values_list("pk", "data_ttl_days"):
        cutoff = now - timedelta(days=ttl_days)
        while True:
            with transaction.atomic():
                agenda_ids = list(
                    AgendaProgress.objects.select_for_update(skip_locked=True)
                    .filter(customer_id=customer_id, state__in=TERMINAL, completed_at__lt=cutoff)
                    .values_list("agenda_id", flat=True)[:batch_size]
                )
                if agenda_ids:
                    Agenda.objects.filter(
                        pk__in=agenda_ids,
                        progress__state__in=TERMINAL,
                        progress__completed_at__lt=cutoff,
                    ).delete()
            reaped += len(agenda_ids)
            if len(agenda_ids) < batch_size:
                break
    if reaped:
        logger.info("reaped %d terminal agenda(s)", reaped)
    return reaped
