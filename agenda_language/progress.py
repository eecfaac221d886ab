"""An agenda's percent from its operations': every succeeded operation counts 100, every
executing one its own percent, the rest 0, averaged over all operations (docs/design.md §6.4)."""

from collections.abc import Iterable

SUCCEEDED = "succeeded"
EXECUTING = "executing"


def percent_rollup(operations: Iterable[tuple[str, float]]) -> float:
    """The agenda's percent from `(state, percent_complete)` of each operation, 0–100, 2 places."""
    count = 0
    total = 0.0
    for state, percent in operations:
        count += 1
        if state == SUCCEEDED:
            total += 100.0
        elif state == EXECUTING:
            total += min(100.0, max(0.0, float(percent)))
    if not count:
        return 0.0
    return round(min(100.0, max(0.0, total / count)), 2)
