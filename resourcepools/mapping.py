"""Which insight of a pool takes an agenda (docs/design.md §5.1)."""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Mapper names compare lowercased without underscores, so POP's `operationType`/`paramMap`
# spellings work alongside ours.
OPERATION_TYPE = "operationtype"
OPERATION_NAME = "operationname"
PARAM_MAPPERS = frozenset({"param", "parammap"})


@dataclass(frozen=True)
class InsightCandidate:
    """An insight the agenda's customer may submit to, with its mappers as stored."""

    id: str
    name: str
    order: int
    created_at: datetime
    mappers: Any


def _mapper_key(name: Any) -> str:
    """Normalise a mapper name: `operation_type`, `operationType` → `operationtype`."""
    return str(name).replace("_", "").lower()


def _values(raw: Any) -> set[str]:
    """Return a mapper's match values, stripped and lowercased."""
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list | tuple | set | frozenset):
        return set()
    return {str(value).strip().lower() for value in raw}


def _text(value: Any) -> str:
    """Stringify a param value the way a `key=value` mapper writes it."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True)


def _param_pairs(params: Any) -> set[str]:
    """Return `key=value` (lowercased) for every entry of a params object."""
    if not isinstance(params, Mapping):
        return set()
    return {f"{key}={_text(value)}".lower() for key, value in params.items()}


def _mapper_dicts(mappers: Any) -> Iterable[Mapping[str, Any]]:
    """Yield the mapper objects of a candidate (one object or a list of them)."""
    if isinstance(mappers, Mapping):
        yield mappers
    elif isinstance(mappers, list | tuple):
        for item in mappers:
            if isinstance(item, Mapping):
                yield item


def insight_matches(
    candidate: InsightCandidate, *, operations: list[dict], params: Mapping[str, Any]
) -> bool:
    """Tell whether any mapper of `candidate` accepts the agenda (case-insensitive)."""
    operation_types = {str(operation.get("type", "")).lower() for operation in operations}
    operation_names = {str(operation.get("name", "")).lower() for operation in operations}
    pairs: set[str] | None = None
    for mapper in _mapper_dicts(candidate.mappers):
        for name, raw in mapper.items():
            key, values = _mapper_key(name), _values(raw)
            if key == OPERATION_TYPE and values & operation_types:
                return True
            if key == OPERATION_NAME and values & operation_names:
                return True
            if key in PARAM_MAPPERS and values:
                if pairs is None:
                    pairs = _param_pairs(params).union(
                        *(_param_pairs(operation.get("params")) for operation in operations)
                    )
                if values & pairs:
                    return True
    return False


def accepted_operation_types(candidates: Sequence[InsightCandidate]) -> list[str]:
    """Every operation type some candidate's `operation_type` mapper accepts, sorted."""
    accepted: set[str] = set()
    for candidate in candidates:
        for mapper in _mapper_dicts(candidate.mappers):
            for name, raw in mapper.items():
                if _mapper_key(name) == OPERATION_TYPE:
                    accepted |= _values(raw)
    return sorted(accepted)


def choose_insight(
    candidates: Sequence[InsightCandidate],
    *,
    operations: list[dict],
    params: Mapping[str, Any],
    default_insight: str | None = None,
) -> InsightCandidate | None:
    """Return the matching insight: `default_insight` if it matches, else lowest order, oldest."""
    matches = sorted(
        (
            candidate
            for candidate in candidates
            if insight_matches(candidate, operations=operations, params=params or {})
        ),
        key=lambda candidate: (candidate.order, candidate.created_at, str(candidate.id)),
    )
    if default_insight:
        wanted = default_insight.strip().lower()
        for candidate in matches:
            if wanted in (candidate.name.lower(), str(candidate.id).lower()):
                return candidate
    return matches[0] if matches else None
