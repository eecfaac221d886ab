"""Generated operations (POP updateAgenda): a running agenda's worker appends operations, checked
with the rules of submitted ones (docs/design.md §4, §5.1)."""

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from agendas import states
from agendas.models import AgendaProgress, OperationProgress
from agendas.validation import validate_operations
from scheduling.report import current_execution


def execution_add_operations(
    *,
    execution_id: object,
    lease_token: object,
    operations: list[dict],
    now: datetime | None = None,
) -> list[OperationProgress]:
    """Append generated operations to the running agenda (POP updateAgenda); renews the lease.

    Each operation is checked with the rules of a submitted one (docs/design.md §5.1) against the
    agenda's operations plus those generated before: names new to the agenda
    (case-insensitively), `depends_on` and references naming known operations, no cycles.
    Any problem is a 400 by field path (`operations.<i>.…`, indexes of `operations`) and
    nothing is written. Its whole definition is kept, so a retry's pull hands it to the next
    worker (docs/design.md §4). Repeating an already generated operation with the same definition is
    accepted and changes nothing, so a retried call is harmless. Locks the progress and
    execution rows.
    """
    now = now or timezone.now()
    with transaction.atomic():
        progress, execution = current_execution(execution_id, lease_token)
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
