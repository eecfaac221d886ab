"""Operation states within an agenda: an operation's transitions, what a worker's report sets on
its operations, and the agenda percent rolled up from them. Each function works inside the
caller's transaction, on the rows of an agenda whose progress row the caller holds.
"""

from collections.abc import Iterable
from datetime import datetime

from django.utils import timezone

from agenda_language.progress import percent_rollup as agenda_percent
from agendas.models import AgendaProgress, OperationProgress

OpState = OperationProgress.State
OPERATION_TERMINAL: frozenset[str] = frozenset({OpState.SUCCEEDED, OpState.FAILED, OpState.ABORTED})
# `OpState.values` builds its list again at every read (12 µs); a report reads it per operation.
OPERATION_STATES: frozenset[str] = frozenset(OpState.values)


def operation_set_state(
    operation: OperationProgress, target: str, *, now: datetime | None = None
) -> list[str]:
    """Set an operation's state and its timing; return the fields changed (caller saves)."""
    if target not in OPERATION_STATES:
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
            # Reports are sparse (docs/design.md §6.4): an operation that started and finished
            # between two reports arrives only as done. It still ran once, no later than now.
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


def operations_apply_report(
    operations: dict[str, OperationProgress], items: list[dict], *, now: datetime
) -> list[OperationProgress]:
    """Apply a report's sparse operation items (names already checked) and save what changed."""
    changed: list[OperationProgress] = []
    for item in items:
        operation = operations[item["name"]]
        fields = operation_apply_item(operation, item, now=now)
        if fields:
            operation.save(update_fields=sorted({*fields, "updated_at"}))
            changed.append(operation)
    return changed


def operation_apply_item(operation: OperationProgress, item: dict, *, now: datetime) -> list[str]:
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
    """Agenda percent from its operation rows, by the roll-up the worker uses too."""
    return agenda_percent((operation.state, operation.percent_complete) for operation in operations)


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
