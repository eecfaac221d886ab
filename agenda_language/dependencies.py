"""What each operation of an agenda waits for, and the order that follows (docs/design.md §5.1).

An operation waits for the operations named in its `depends_on` and in POP's
`params.dependsOn` (each a list, or POP's comma-separated string), and for every operation
whose output it references (`@<name.out…>`) in its `payload` or its `params`. Names match
ignoring case. The server validates and lays out this graph and the worker runs it: both call
these functions.
"""

import graphlib
import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from agenda_language.references import find_references, output_operation

# POP's worker also reads a comma-separated `params.dependsOn`.
PARAMS_DEPENDS_ON = "dependsOn"
REFERENCING_FIELDS = ("payload", "params")


def is_name(value: Any) -> bool:
    """Tell whether `value` is a usable operation name or type."""
    return isinstance(value, str) and value.strip() != ""


def _name_list(source: Any) -> list[str]:
    if isinstance(source, str):
        items = source.split(",")
    elif isinstance(source, list | tuple):
        items = [item for item in source if isinstance(item, str)]
    else:
        return []
    return [item.strip() for item in items if item.strip()]


def params_depends_on(operation: Mapping[str, Any]) -> list[str]:
    """The names in POP's `params.dependsOn` (a comma list or a list)."""
    params = operation.get("params")
    if not isinstance(params, Mapping):
        return []
    return _name_list(params.get(PARAMS_DEPENDS_ON))


def declared_dependencies(operation: Mapping[str, Any]) -> list[str]:
    """`depends_on` plus `params.dependsOn`, as written."""
    return _name_list(operation.get("depends_on")) + params_depends_on(operation)


def referenced_dependencies(operation: Mapping[str, Any]) -> list[str]:
    """The operations whose output the payload or params reference, as written."""
    names = []
    for field in REFERENCING_FIELDS:
        for reference in find_references(operation.get(field)):
            target = output_operation(reference.name)
            if target is not None:
                names.append(target)
    return names


def waits_for(operation: Mapping[str, Any]) -> list[str]:
    """Everything one operation waits for, declared or referenced, as written, each once."""
    names: list[str] = []
    seen: set[str] = set()
    for name in declared_dependencies(operation) + referenced_dependencies(operation):
        if name.lower() not in seen:
            seen.add(name.lower())
            names.append(name)
    return names


def canonical_names(operations: list[Any]) -> dict[str, str]:
    """Map each lowercased operation name to its first spelling."""
    names: dict[str, str] = {}
    for operation in operations:
        if isinstance(operation, Mapping) and is_name(operation.get("name")):
            names.setdefault(operation["name"].lower(), operation["name"])
    return names


def operation_dependencies(operations: list[Any]) -> dict[str, set[str]]:
    """Per operation name, the operations it waits for (names spelled as the agenda does)."""
    canonical = canonical_names(operations)
    dependencies: dict[str, set[str]] = {}
    for operation in operations:
        if not isinstance(operation, Mapping) or not is_name(operation.get("name")):
            continue
        dependencies.setdefault(operation["name"], set()).update(
            canonical.get(name.lower(), name) for name in waits_for(operation)
        )
    return dependencies


def dependency_graph(operations: list[Any]) -> dict[str, list[str]]:
    """Edges from each uniquely named operation to the known operations it waits for, in the
    agenda's order (unknown names and self-references are the validator's to report)."""
    canonical = canonical_names(operations)
    graph: dict[str, list[str]] = {}
    for operation in operations:
        if not isinstance(operation, Mapping) or not is_name(operation.get("name")):
            continue
        name = operation["name"]
        if canonical[name.lower()] != name or name in graph:
            continue
        targets: list[str] = []
        for dependency in waits_for(operation):
            target = canonical.get(dependency.lower())
            if target is not None and target != name and target not in targets:
                targets.append(target)
        graph[name] = targets
    return graph


def cycle_message(cycle: list[str]) -> str:
    """Describe a dependency cycle, e.g. `Operations form a cycle: a -> b -> a`."""
    return f"Operations form a cycle: {' -> '.join(cycle)}"


def _cycle_from(error: graphlib.CycleError, position: dict[str, int]) -> list[str]:
    """graphlib names a cycle from dependency to dependant; turn it round so each operation is
    followed by one it waits for, starting at the earliest in the agenda."""
    nodes = list(reversed(error.args[1]))[:-1]
    start = min(range(len(nodes)), key=lambda index: position[nodes[index]])
    nodes = nodes[start:] + nodes[:start]
    return [*nodes, nodes[0]]


def find_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Every separate dependency cycle, each as `[a, b, …, a]` (`a` waits for `b`), earliest
    first; operations of one reported cycle are left out of the search for the next."""
    if not any(graph.values()):
        return []  # no operation waits for another (most agendas): nothing can form a cycle
    position = {name: index for index, name in enumerate(graph)}
    remaining = {name: list(targets) for name, targets in graph.items()}
    cycles = []
    while True:
        try:
            graphlib.TopologicalSorter(remaining).prepare()
        except graphlib.CycleError as error:
            cycle = _cycle_from(error, position)
            cycles.append(cycle)
            members = set(cycle)
            remaining = {
                name: [target for target in targets if target not in members]
                for name, targets in remaining.items()
                if name not in members
            }
        else:
            return sorted(cycles, key=lambda cycle: position[cycle[0]])


def topological_order(operations: list[Any]) -> list[str]:
    """Operation names so each follows what it waits for; among the ready, the agenda's order.
    Raises ValueError naming a cycle."""
    graph = dependency_graph(operations)
    position = {name: index for index, name in enumerate(graph)}
    sorter = graphlib.TopologicalSorter(graph)
    try:
        sorter.prepare()
    except graphlib.CycleError:
        raise ValueError(cycle_message(find_cycles(graph)[0])) from None
    ready: list[tuple[int, str]] = []
    order: list[str] = []
    while sorter.is_active():
        for name in sorter.get_ready():
            heapq.heappush(ready, (position[name], name))
        position_and_name = heapq.heappop(ready)
        order.append(position_and_name[1])
        sorter.done(position_and_name[1])
    return order


def operations_to_reset(operations: list[Any], chosen: Iterable[str]) -> set[str]:
    """The chosen operations plus everything that waits for them, transitively."""
    canonical = canonical_names(operations)
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
