"""Report (docs/design.md §6.4): a worker's progress and outcome for its execution, one or a batch:
lock, check the lease, apply, roll up, renew or end. Also the operations a generator adds.
"""

import functools
import hmac
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.http import Http404
from django.utils import timezone

from agendas import states
from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.states import InvalidTransition, S
from agendas.states.operation_rows import operations_of_progress
from core.errors import refusal_status, validation_messages
from core.rows import RowLoader, load_row, relate_one_way, select_list
from core.statement_text import among
from resourcepools.models import Customer, Insight
from scheduling import metrics
from scheduling.locks import database_is_postgresql

logger = logging.getLogger("pop.scheduling")
Outcome = Execution.Outcome
REPORT_OUTCOMES: dict[str, str] = {
    S.SUCCEEDED: Outcome.SUCCEEDED,
    S.FAILED: Outcome.FAILED,
    S.ABORTED: Outcome.ABORTED,
    S.PAUSED: Outcome.PAUSED,
}
MAX_BATCH_REPORTS = 100


@dataclass(frozen=True)
class ReportAnswer:
    """What the worker is told: stop (abort), pause, and until when its lease runs."""

    abort: bool
    pause: bool
    lease_expires_at: datetime | None
    state: str
    pause_now: bool = False  # with pause: stop the running operations at once


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
    retryable: bool | None = None,
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
            retryable=retryable,
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
    code = refusal_status(error)
    assert code is not None, error
    if code == 400:
        return BatchItemResult(
            execution_id, 400, detail="invalid report", errors=validation_messages(error)
        )
    if code == 409:
        return BatchItemResult(
            execution_id, 409, detail=str(error), current_state=error.current_state
        )
    return BatchItemResult(execution_id, code, detail=str(error))


_REPORT_FIELDS = frozenset(
    {
        "execution",
        "lease_token",
        "percent_complete",
        "message",
        "operations",
        "state",
        "diagnostics",
        "retryable",
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
    operations = states.operations_apply_reports(
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
    states.executions_report_many(
        operations=operations, renewed=renewed, succeeded=succeeded, now=now
    )
    results = {}
    for entry in together:
        execution_id = entry.report.get("execution")
        if entry.report.get("state") is None:
            answer = ReportAnswer(
                abort=entry.progress.abort_requested,
                pause=entry.progress.pause_requested,
                pause_now=entry.progress.pause_now,
                lease_expires_at=entry.execution.lease_expires_at,
                state=entry.progress.state,
            )
        else:
            answer = ReportAnswer(
                abort=False, pause=False, lease_expires_at=None, state=entry.progress.state
            )
        results[entry.index] = BatchItemResult(execution_id, 200, answer=answer)
    # The counters once per batch, by what it did (a label's look-up takes a lock).
    if renewed:
        metrics.REPORTS.labels("progress").inc(len(renewed))
    if succeeded:
        metrics.REPORTS.labels(S.SUCCEEDED).inc(len(succeeded))
        metrics.OUTCOMES.labels(Outcome.SUCCEEDED).inc(len(succeeded))
    return results


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
        "labels",
        "callback_url",
        "created_at",
        "priority",
        "max_attempts",
        "retry_delay_seconds",
    }
)
_REPORT_CUSTOMER_FIELDS = frozenset({"id", "slug", "callback_url"})
_REPORT_INSIGHT_FIELDS = frozenset({"id", "lease_seconds", "scheduling_algorithm"})


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
    listed, parameters = among([prepare(pk, connection) for pk in execution_ids])
    sql = (
        f"SELECT {select_list(loaders)} "
        f"FROM {table[Execution]} e "
        f"JOIN {table[AgendaProgress]} p ON p.agenda_id = e.agenda_id "
        f"JOIN {table[Agenda]} a ON a.id = e.agenda_id "
        f"JOIN {table[Customer]} c ON c.id = a.customer_id "
        f"JOIN {table[Insight]} i ON i.id = a.insight_id "
        f"WHERE e.id {listed} ORDER BY e.id {lock}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, parameters)
        rows = cursor.fetchall()
    locked = {}
    for row in rows:
        progress, execution, agenda, customer, insight = load_row(loaders, row)
        agenda.customer, agenda.insight = customer, insight
        if execution.insight_id == insight.pk:
            execution.insight = insight  # fair share's charge skips other algorithms' lanes
        relate_one_way(progress, "agenda", agenda)
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


def current_execution(
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
    for operation in operations_of_progress(progress.pk for progress in progresses):
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
    retryable: bool | None = None,
) -> ReportAnswer:
    if state is not None and state not in REPORT_OUTCOMES:
        raise ValidationError({"state": [f"Must be one of {sorted(REPORT_OUTCOMES)}."]})
    progress, execution = current_execution(execution_id, lease_token)
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
            pause_now=progress.pause_now,
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
        retryable=_retryable(retryable, items),
    )
    metrics.REPORTS.labels(state).inc()
    metrics.OUTCOMES.labels(outcome).inc()
    return ReportAnswer(abort=False, pause=False, lease_expires_at=None, state=progress.state)


def _retryable(retryable: bool | None, items: list[dict]) -> bool:
    """A failure may be retried unless the report, or a failed operation in it, says it may
    not (`retryable: false`: a missing input, an unknown type, a 4xx from a fetch)."""
    if retryable is False:
        return False
    return not any(
        item.get("retryable") is False and item.get("state") == OperationProgress.State.FAILED
        for item in items
    )


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
