"""Which ready agendas a fill moves into an insight's queue (docs/design.md §6.1).

Every picker takes `candidates`: customer id → that customer's ready agendas, already ordered
`priority` desc then `added_at` asc, and already truncated to what the customer may take now
(the caller applies `max_executing` by truncating; a capped customer maps to an empty list).
Pickers only ever take a prefix of each customer's list, so priority order within a customer
always holds. `room` is how many agendas the queue can take.
"""

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

FIFO = "fifo"
ROUND_ROBIN = "round_robin"
WEIGHTED_FAIR = "weighted_fair"
ALGORITHMS = (FIFO, ROUND_ROBIN, WEIGHTED_FAIR)

Candidates = Mapping[Any, Sequence["ReadyCandidate"]]


@dataclass(frozen=True)
class ReadyCandidate:
    """A ready agenda as the fill sees it."""

    agenda_id: Any
    customer_id: Any
    priority: int
    added_at: datetime


def _id_key(value: Any) -> tuple[int, Any]:
    """Order ids deterministically: integers numerically, anything else by its text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


def pick_fifo(candidates: Candidates, room: int) -> list[ReadyCandidate]:
    """Take up to `room` agendas, oldest `added_at` first across customers."""
    if room <= 0:
        return []
    lists = [list(agendas) for agendas in candidates.values() if agendas]
    heads = [
        (items[0].added_at, -items[0].priority, _id_key(items[0].agenda_id), number, 0)
        for number, items in enumerate(lists)
    ]
    heapq.heapify(heads)
    picked: list[ReadyCandidate] = []
    while heads and len(picked) < room:
        *_, number, position = heapq.heappop(heads)
        items = lists[number]
        picked.append(items[position])
        if position + 1 < len(items):
            following = items[position + 1]
            heapq.heappush(
                heads,
                (
                    following.added_at,
                    -following.priority,
                    _id_key(following.agenda_id),
                    number,
                    position + 1,
                ),
            )
    return picked


def _unique(ids: Sequence[Any]) -> list[Any]:
    """Drop repeated customer ids (compared as text), keeping the first."""
    seen: set[str] = set()
    kept = []
    for customer_id in ids:
        if str(customer_id) not in seen:
            seen.add(str(customer_id))
            kept.append(customer_id)
    return kept


class _Backlog:
    """Per-customer cursors over `candidates`; customer ids compare as text (JSON-safe)."""

    def __init__(self, candidates: Candidates) -> None:
        self.lists = {str(key): list(agendas) for key, agendas in candidates.items()}
        self.taken = dict.fromkeys(self.lists, 0)

    def has_work(self, customer_id: Any) -> bool:
        key = str(customer_id)
        return self.taken.get(key, 0) < len(self.lists.get(key, ()))

    def take(self, customer_id: Any) -> ReadyCandidate | None:
        key = str(customer_id)
        if not self.has_work(key):
            return None
        agenda = self.lists[key][self.taken[key]]
        self.taken[key] += 1
        return agenda


def _one_pass(
    backlog: _Backlog, customer_ids: Sequence[Any], limit: int, into: list[ReadyCandidate]
) -> set[str]:
    """Give each customer in turn one agenda until `limit` are in `into`; return who got one."""
    served: set[str] = set()
    for customer_id in customer_ids:
        if len(into) >= limit:
            break
        agenda = backlog.take(customer_id)
        if agenda is not None:
            into.append(agenda)
            served.add(str(customer_id))
    return served


def pick_round_robin(
    candidates: Candidates,
    room: int,
    *,
    pending_customer_ids: Sequence[Any],
    all_customer_ids: Sequence[Any],
) -> tuple[list[ReadyCandidate], list[Any]]:
    """Take up to `room` agendas with POP's two-pass cursor; return them and the new cursor."""
    if room <= 0:
        return [], list(pending_customer_ids)
    # POP's second pass runs over every pool customer, a superset of the cursor; customers
    # still owed a turn but without ready work must stay owed, so keep them in that set.
    everyone = _unique([*all_customer_ids, *pending_customer_ids, *candidates.keys()])
    pending = _unique(pending_customer_ids) or everyone
    if not pending:
        return [], []
    backlog = _Backlog(candidates)
    first: list[ReadyCandidate] = []
    served_first = _one_pass(backlog, pending, room, first)
    if len(first) >= room:
        return first, [c for c in pending if str(c) not in served_first]
    wanted = room - len(first)
    second: list[ReadyCandidate] = []
    served_second: set[str] = set()
    while len(second) < wanted:
        served = _one_pass(backlog, everyone, wanted, second)
        if not served:
            break
        served_second |= served
    return first + second, [c for c in everyone if str(c) not in served_second]


def pick_weighted_fair(
    candidates: Candidates,
    room: int,
    *,
    weights: Mapping[Any, float],
    deficits: Mapping[str, float],
) -> tuple[list[ReadyCandidate], dict[str, float]]:
    """Take up to `room` agendas by deficit round robin; return them and the new deficits.

    A round gives every customer with work `weight` credits (missing weight = 1); one agenda
    costs one credit and unspent credit carries over. A round that the room cut short is
    finished by the next fill before a new one starts (customers still holding a whole
    credit go first), so no customer is favoured by where fills happen to end. A customer
    with no candidates loses its credit (DRR's reset), so idle time banks no share.
    """
    credit = {str(key): float(value) for key, value in deficits.items()}
    if room <= 0:
        return [], credit
    weight_of = {str(key): value for key, value in weights.items()}
    backlog = _Backlog(candidates)
    customers = sorted(key for key in backlog.lists if backlog.has_work(key))
    for key in customers:
        if weight_of.get(key, 1) <= 0:
            raise ValueError(f"Customer {key} has weight {weight_of[key]}; weights must be > 0.")
    credit = {key: credit.get(key, 0.0) for key in customers}
    picked: list[ReadyCandidate] = []
    while len(picked) < room:
        active = [key for key in customers if backlog.has_work(key)]
        if not active:
            break
        in_round = [key for key in active if credit[key] >= 1]
        if not in_round:
            for key in active:
                credit[key] += weight_of.get(key, 1)
            continue
        # One agenda per credit holder per pass: a big weight does not starve the others
        # for a whole round, and the room running out mid-round leaves credit, not debt.
        for key in in_round:
            if len(picked) >= room:
                break
            agenda = backlog.take(key)
            if agenda is not None:
                picked.append(agenda)
                credit[key] -= 1
    # Customers that emptied their list keep their credit: the list may only have been
    # truncated to `room`; the next fill drops it if they really have no work left.
    return picked, {key: value for key, value in credit.items() if value > 0}


def pick(
    algorithm: str,
    candidates: Candidates,
    room: int,
    *,
    state: Mapping[str, Any],
    weights: Mapping[Any, float],
) -> tuple[list[ReadyCandidate], dict[str, Any]]:
    """Run `algorithm` over `candidates`; return the picks and the insight's new state.

    `state` holds `pending_customer_ids` (round robin) and `deficits` (weighted fair); the
    new state is JSON-storable (customer ids as text). Round robin serves customers in the
    order of `candidates`.
    """
    new_state = dict(state)
    if algorithm == FIFO:
        return pick_fifo(candidates, room), new_state
    if algorithm == ROUND_ROBIN:
        picked, pending = pick_round_robin(
            candidates,
            room,
            pending_customer_ids=list(state.get("pending_customer_ids") or []),
            all_customer_ids=list(candidates.keys()),
        )
        new_state["pending_customer_ids"] = [str(customer_id) for customer_id in pending]
        return picked, new_state
    if algorithm == WEIGHTED_FAIR:
        picked, deficits = pick_weighted_fair(
            candidates, room, weights=weights, deficits=state.get("deficits") or {}
        )
        new_state["deficits"] = deficits
        return picked, new_state
    raise ValueError(f"Unknown scheduling algorithm {algorithm!r}; expected one of {ALGORITHMS}.")
