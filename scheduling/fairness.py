"""Which ready agendas a fill moves into an insight's queue (docs/design.md §6.1). Pure: no
database, no clock.

`round_robin`, `weighted_fair` and `fair_share` are one mechanism over customer *lanes*: each
lane has received some service (`served`), the next turn always goes to the least-served lane
(ties: the lowest customer id), and a turn adds the lane's `charge` — 1 for round robin,
1/weight for weighted fair, the agenda's expected seconds × the decay inflation / weight for
fair share. The fill reads lanes in `served` order from an index, so `serve_lanes` works on the
few lanes at the front and is told where the unread ones begin (`horizon`).

`fifo` (the control) takes the oldest ready agendas across customers: `pick_fifo` takes
`candidates`, customer id → that customer's ready agendas in `priority` desc, `added_at` order,
truncated to what the customer may take now, and merges their heads by age. Every picker takes
a prefix of each customer's agendas in priority order, so priority order within a customer
always holds.
"""

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

FIFO = "fifo"
ROUND_ROBIN = "round_robin"
WEIGHTED_FAIR = "weighted_fair"
FAIR_SHARE = "fair_share"
ALGORITHMS = (FIFO, ROUND_ROBIN, WEIGHTED_FAIR, FAIR_SHARE)
LANE_ALGORITHMS = (ROUND_ROBIN, WEIGHTED_FAIR, FAIR_SHARE)

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


def within_allowance(
    picks: Sequence[ReadyCandidate], allowance: dict[Any, int]
) -> list[ReadyCandidate]:
    """The picks in order, each customer in `allowance` kept to at most that many (its first
    ones); customers not in it keep all theirs."""
    left = dict(allowance)
    kept = []
    for pick in picks:
        if pick.customer_id in left:
            if left[pick.customer_id] <= 0:
                continue
            left[pick.customer_id] -= 1
        kept.append(pick)
    return kept


@dataclass(frozen=True)
class Lane:
    """A customer's lane as `serve_lanes` sees it."""

    customer_id: Any
    served: float
    may_take: int  # turns it may get now: its ready agendas, cap and rate limit allowing
    charge: float = 1.0  # what one turn adds to `served`


@dataclass(frozen=True)
class Turns:
    """What `serve_lanes` gave: `order` lists the lane index of each turn, in turn order."""

    order: list[int]
    counts: list[int]
    served: list[float]  # each lane's service after its turns
    stopped_at_horizon: bool  # unread lanes may be owed the next turn: read more, serve again
    frontier: float | None  # service level at which the last turn was given


def turn_key(served: float, customer_id: Any) -> tuple[float, tuple[int, Any]]:
    """The order turns are given in (and the fill's lane index order)."""
    return (served, _id_key(customer_id))


def lane_charge(algorithm: str, *, weight: float, cost_seconds: float, inflation: float) -> float:
    """What one agenda adds to its lane's `served` under `algorithm`."""
    if weight <= 0:
        raise ValueError(f"Weight {weight}: weights must be > 0.")
    if algorithm == ROUND_ROBIN:
        return 1.0
    if algorithm == WEIGHTED_FAIR:
        return 1.0 / weight
    if algorithm == FAIR_SHARE:
        return cost_seconds * inflation / weight
    raise ValueError(f"{algorithm!r} does not serve lanes; expected one of {LANE_ALGORITHMS}.")


def serve_lanes(lanes: Sequence[Lane], room: int, *, horizon: tuple | None = None) -> Turns:
    """Give up to `room` turns, one at a time, each to the least-served lane that may take one.

    `horizon` is the `turn_key` of the last lane read when more lanes exist beyond it (their
    keys are greater): serving stops before a turn whose key would pass it, since an unread
    lane may be owed that turn. Round robin (charge 1 each) so never serves a lane twice while
    another lane with work has not been served once more than it.
    """
    counts = [0] * len(lanes)
    served = [lane.served for lane in lanes]
    order: list[int] = []
    heap = [
        (turn_key(lane.served, lane.customer_id), index)
        for index, lane in enumerate(lanes)
        if lane.may_take > 0
    ]
    heapq.heapify(heap)
    stopped = False
    frontier = None
    while heap and len(order) < room:
        key, index = heap[0]
        if horizon is not None and key > horizon:
            stopped = True
            break
        heapq.heappop(heap)
        frontier = served[index]
        order.append(index)
        counts[index] += 1
        served[index] += lanes[index].charge
        if counts[index] < lanes[index].may_take:
            heapq.heappush(heap, (turn_key(served[index], lanes[index].customer_id), index))
    if not heap and horizon is not None and len(order) < room:
        stopped = True  # every read lane is done: the unread ones may take the rest
    return Turns(
        order=order, counts=counts, served=served, stopped_at_horizon=stopped, frontier=frontier
    )
