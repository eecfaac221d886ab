"""Cross-field checks of an agenda's operations and their dependency graph (docs/design.md §5.1,
§7)."""

import math
from collections.abc import Mapping
from typing import Any

from agenda_language.dependencies import (
    cycle_message,
    dependency_graph,
    find_cycles,
    is_name,
    params_depends_on,
)
from agenda_language.references import POP_PREFIX, find_references, output_operation
from agendas.labels import labels_problems

MAX_OPERATIONS = 1000
MAX_NAME_LENGTH = 100
OPERATION_FIELDS = frozenset({"name", "type", "payload", "depends_on", "timeout_seconds", "params"})


def _listed_depends_on(operation: Any) -> Any:
    """The operation with `depends_on` cut to the names of a list (anything else: none)."""
    if not isinstance(operation, Mapping) or "depends_on" not in operation:
        return operation
    depends_on = operation["depends_on"]
    names = (
        [item for item in depends_on if isinstance(item, str)]
        if isinstance(depends_on, list)
        else []
    )
    return {**operation, "depends_on": names}


def validate_operations(operations: Any) -> dict[str, list[str]]:
    """Return every problem of an agenda's operations by field path; `{}` when valid."""
    errors: dict[str, list[str]] = {}

    def add(path: str, message: str) -> None:
        messages = errors.setdefault(path, [])
        if message not in messages:
            messages.append(message)

    if not isinstance(operations, list):
        return {"operations": ["Must be a list of operations."]}
    if not operations:
        add("operations", "At least one operation is required.")
    if len(operations) > MAX_OPERATIONS:
        add(
            "operations",
            f"Ensure this list has no more than {MAX_OPERATIONS} operations "
            f"(it has {len(operations)}).",
        )

    first_index: dict[str, int] = {}
    for index, operation in enumerate(operations):
        path = f"operations.{index}"
        if not isinstance(operation, Mapping):
            add(path, "Must be an object.")
            continue
        unknown = sorted(str(key) for key in operation if key not in OPERATION_FIELDS)
        if unknown:
            add(path, f"Unknown fields: {', '.join(unknown)}.")
        name = operation.get("name")
        if name is None:
            add(f"{path}.name", "This field is required.")
        elif not is_name(name):
            add(f"{path}.name", "Must be a non-empty string.")
        elif len(name) > MAX_NAME_LENGTH:
            add(f"{path}.name", f"Ensure this field has no more than {MAX_NAME_LENGTH} characters.")
        if is_name(name):
            first = first_index.setdefault(name.lower(), index)
            if first != index:
                add(
                    f"{path}.name",
                    f"Operation name '{name}' is already used by operations.{first}.name "
                    "(names are unique case-insensitively).",
                )
        operation_type = operation.get("type")
        if operation_type is None:
            add(f"{path}.type", "This field is required.")
        elif not is_name(operation_type):
            add(f"{path}.type", "Must be a non-empty string.")
        timeout = operation.get("timeout_seconds")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0
        ):
            add(f"{path}.timeout_seconds", "Must be a positive integer.")
        params = operation.get("params")
        if params is not None and not isinstance(params, Mapping):
            add(f"{path}.params", "Must be an object.")

    known = set(first_index)
    for index, operation in enumerate(operations):
        if not isinstance(operation, Mapping):
            continue
        path = f"operations.{index}"
        own = operation["name"].lower() if is_name(operation.get("name")) else None
        depends_on = operation.get("depends_on")
        if depends_on is not None:
            if not isinstance(depends_on, list) or not all(
                isinstance(item, str) for item in depends_on
            ):
                add(f"{path}.depends_on", "Must be a list of operation names.")
            else:
                for dependency in depends_on:
                    if dependency.lower() == own:
                        add(f"{path}.depends_on", "An operation cannot depend on itself.")
                    elif dependency.lower() not in known:
                        add(f"{path}.depends_on", f"Unknown operation '{dependency}'.")
        for dependency in params_depends_on(operation):
            if dependency.lower() == own:
                add(f"{path}.params", "An operation cannot depend on itself.")
            elif dependency.lower() not in known:
                add(f"{path}.params", f"dependsOn names unknown operation '{dependency}'.")
        for field in ("payload", "params"):
            for reference in find_references(operation.get(field)):
                if reference.name.startswith(POP_PREFIX):
                    continue
                target = output_operation(reference.name)
                if target is None:
                    add(
                        f"{path}.{field}",
                        f"Reference {reference.text} must name an operation output "
                        "(@<name.out…>) or pop.*.",
                    )
                elif target.lower() == own:
                    add(
                        f"{path}.{field}",
                        f"Reference {reference.text} is the operation's own output.",
                    )
                elif target.lower() not in known:
                    add(
                        f"{path}.{field}",
                        f"Reference {reference.text} names no operation of this agenda.",
                    )

    # The API takes `depends_on` as a list only (refused above otherwise); the cycle check reads
    # the names a well-formed list would hold, so one malformed field is one error.
    well_formed = [_listed_depends_on(operation) for operation in operations]
    for cycle in find_cycles(dependency_graph(well_formed)):
        add("operations", cycle_message(cycle))
    return errors


AGENDA_OPTION_RANGES: dict[str, tuple[int, int]] = {
    "priority": (0, 9),
    "max_attempts": (1, 20),
    "retry_delay_seconds": (0, 86_400),
}


# An agenda's expected execution seconds (fair share's charge): a millisecond to a week.
COST_RANGE = (0.001, 604_800)


def validate_agenda_options(**options: Any) -> dict[str, list[str]]:
    """Range checks of an agenda's numeric options (docs/design.md §5.1), for every way in: the
    API's
    serializers check them too, but a service caller (a schedule, the admin, a script) must
    get a field error, not an IntegrityError from the database's check constraints."""
    errors: dict[str, list[str]] = {}
    for name, (low, high) in AGENDA_OPTION_RANGES.items():
        if name not in options:
            continue
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int):
            errors[name] = ["A whole number is required."]
        elif not low <= value <= high:
            errors[name] = [f"Must be between {low} and {high}."]
    if options.get("labels") is not None:
        errors |= labels_problems(options["labels"])
    cost = options.get("cost")
    if cost is not None:
        low, high = COST_RANGE
        if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost):
            errors["cost"] = ["A number of seconds is required."]
        elif not low <= cost <= high:
            errors["cost"] = [f"Must be between {low} and {high} seconds."]
    return errors
