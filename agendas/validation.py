"""Cross-field checks of an agenda's operations and their dependency graph (docs/design.md §5.1,
§7)."""

import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from agendas.references import POP_PREFIX, find_references, output_operation

MAX_OPERATIONS = 1000
MAX_NAME_LENGTH = 100
OPERATION_FIELDS = frozenset({"name", "type", "payload", "depends_on", "timeout_seconds", "params"})
# POP's worker also reads a comma-separated `params.dependsOn`; popclient honours it too.
PARAMS_DEPENDS_ON = "dependsOn"


def _is_name(value: Any) -> bool:
    """Tell whether `value` is a usable operation name or type."""
    return isinstance(value, str) and value.strip() != ""


def _params_depends_on(operation: Mapping[str, Any]) -> list[str]:
    """Return the names in POP's `params.dependsOn` (a comma list or a list)."""
    params = operation.get("params")
    if not isinstance(params, Mapping):
        return []
    source = params.get(PARAMS_DEPENDS_ON)
    if isinstance(source, str):
        items = source.split(",")
    elif isinstance(source, list):
        items = [str(item) for item in source]
    else:
        return []
    return [item.strip() for item in items if item.strip()]


def _declared_dependencies(operation: Mapping[str, Any]) -> list[str]:
    """Return `depends_on` plus `params.dependsOn`, as written."""
    depends_on = operation.get("depends_on")
    if not isinstance(depends_on, list):
        depends_on = []
    return [item for item in depends_on if isinstance(item, str)] + _params_depends_on(operation)


def _referenced_operations(operation: Mapping[str, Any]) -> list[str]:
    """Return the operations whose output the payload or params reference, as written."""
    names = []
    for field in ("payload", "params"):
        for reference in find_references(operation.get(field)):
            target = output_operation(reference.name)
            if target is not None:
                names.append(target)
    return names


def _canonical_names(operations: list[Any]) -> dict[str, str]:
    """Map each lowercased operation name to its first spelling."""
    names: dict[str, str] = {}
    for operation in operations:
        if isinstance(operation, Mapping) and _is_name(operation.get("name")):
            names.setdefault(operation["name"].lower(), operation["name"])
    return names


def operation_dependencies(operations: list[dict]) -> dict[str, set[str]]:
    """Return, per operation name, the operations it waits for (declared or referenced)."""
    canonical = _canonical_names(operations)
    dependencies: dict[str, set[str]] = {}
    for operation in operations:
        if not isinstance(operation, Mapping) or not _is_name(operation.get("name")):
            continue
        named = _declared_dependencies(operation) + _referenced_operations(operation)
        dependencies.setdefault(operation["name"], set()).update(
            canonical.get(name.lower(), name) for name in named
        )
    return dependencies


def _find_cycle(graph: dict[str, list[str]], members: set[str], start: str) -> list[str]:
    """Return a shortest cycle `start -> … -> start` inside one strongly connected set."""
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target in graph[node]:
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if target in members and target not in previous:
                previous[target] = node
                queue.append(target)
    return [start, start]


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Return one cycle per strongly connected group of two or more operations (Tarjan)."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in graph:
        if root in index_of:
            continue
        # Iterative, so 1000 chained operations do not hit the recursion limit.
        work = [(root, iter(graph[root]))]
        index_of[root] = low[root] = len(index_of)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for target in successors:
                if target not in index_of:
                    index_of[target] = low[target] = len(index_of)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index_of[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index_of[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    order = {name: position for position, name in enumerate(graph)}
    cycles = []
    for group in groups:
        start = min(group, key=order.__getitem__)
        cycles.append(_find_cycle(graph, group, start))
    return sorted(cycles, key=lambda cycle: order[cycle[0]])


def _dependency_graph(operations: list[Any]) -> dict[str, list[str]]:
    """Edges from each uniquely named operation to the known operations it waits for."""
    canonical = _canonical_names(operations)
    graph: dict[str, list[str]] = {}
    for operation in operations:
        if not isinstance(operation, Mapping) or not _is_name(operation.get("name")):
            continue
        name = operation["name"]
        if canonical[name.lower()] != name or name in graph:
            continue
        targets: list[str] = []
        for dependency in _declared_dependencies(operation) + _referenced_operations(operation):
            target = canonical.get(dependency.lower())
            if target is not None and target != name and target not in targets:
                targets.append(target)
        graph[name] = targets
    return graph


def cycle_message(cycle: list[str]) -> str:
    """Describe a dependency cycle, e.g. `Operations form a cycle: a -> b -> a`."""
    return f"Operations form a cycle: {' -> '.join(cycle)}"


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
        elif not _is_name(name):
            add(f"{path}.name", "Must be a non-empty string.")
        elif len(name) > MAX_NAME_LENGTH:
            add(f"{path}.name", f"Ensure this field has no more than {MAX_NAME_LENGTH} characters.")
        if _is_name(name):
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
        elif not _is_name(operation_type):
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
        own = operation["name"].lower() if _is_name(operation.get("name")) else None
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
        for dependency in _params_depends_on(operation):
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

    for cycle in _cycles(_dependency_graph(operations)):
        add("operations", cycle_message(cycle))
    return errors


def operations_to_reset(operations: list[dict], chosen: Iterable[str]) -> set[str]:
    """Return the chosen operations plus everything depending on them, transitively."""
    canonical = _canonical_names(operations)
    dependants: dict[str, set[str]] = {}
    for name, dependencies in operation_dependencies(operations).items():
        for dependency in dependencies:
            dependants.setdefault(dependency, set()).add(name)
    reset = {canonical.get(name.lower(), name) for name in chosen}
    frontier = list(reset)
    while frontier:
        for dependant in dependants.get(frontier.pop(), ()):
            if dependant not in reset:
                reset.add(dependant)
                frontier.append(dependant)
    return reset


def topological_order(operations: list[dict]) -> list[str]:
    """Return operation names so each follows its dependencies; ties keep the given order."""
    graph = _dependency_graph(operations)
    position = {name: index for index, name in enumerate(graph)}
    waiting = {name: len(targets) for name, targets in graph.items()}
    dependants: dict[str, list[str]] = {name: [] for name in graph}
    for name, targets in graph.items():
        for target in targets:
            dependants[target].append(name)
    ready = [position[name] for name, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    names = list(graph)
    order: list[str] = []
    while ready:
        name = names[heapq.heappop(ready)]
        order.append(name)
        for dependant in dependants[name]:
            waiting[dependant] -= 1
            if waiting[dependant] == 0:
                heapq.heappush(ready, position[dependant])
    if len(order) < len(graph):
        raise ValueError(cycle_message(_cycles(graph)[0]))
    return order


AGENDA_OPTION_RANGES: dict[str, tuple[int, int]] = {
    "priority": (0, 9),
    "max_attempts": (1, 20),
    "retry_delay_seconds": (0, 86_400),
}


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
    return errors
