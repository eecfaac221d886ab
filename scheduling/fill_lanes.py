"""The fill's lanes (docs/design.md §6.1): round robin, weighted fair and fair share serve the
least-served active lanes of an insight, read a page of lanes and a lane's ready rows at a time,
and charge each lane for what it moved. Fifo reads its rows through `read_rows` too."""

import functools
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection
from django.db.models import F

from agendas import states
from agendas.models import Agenda
from core.rows import RowLoader, load_row, select_list
from resourcepools.models import Customer, Insight
from scheduling import fairness, metrics, rate_limits
from scheduling.fill_limits import (
    LIMIT_COLUMNS,
    CustomerLimits,
    cap_allowance,
    caps_of,
    limits_of,
    rate_limits_of,
)
from scheduling.locks import database_is_postgresql
from scheduling.models import CustomerLane, InsightScheduleInfo, ReadyAgenda


@dataclass
class LaneState:
    """A lane read by this fill: its customer's limits and the ready rows read so far."""

    pk: int
    customer_id: object
    served: float
    mean_seconds: float | None
    weight: int
    cap: int | None
    may_take: int = 0
    rows: list[fairness.ReadyCandidate] = field(default_factory=list)
    exhausted: bool = False  # `rows` are all its ready agendas


# Lanes whose turns this fill recorded: lane pk -> (new `served`, pending seconds, agendas).
ServedLanes = dict[int, tuple[float, float, int]]


class LaneFill:
    """Round robin, weighted fair and fair share: serve the least-served active lanes.

    Lanes are read a page at a time in `served` order (`lane_turn_order`), their ready rows a
    lane at a time, only as far as the turns need: a page of lanes is enough unless every lane
    on it is served past the first unread one, and a lane's rows are read again, further, only
    when the picker gave it more turns than rows read. Each pass either reads another page or
    learns that a lane has no more ready rows, so rows and lanes read stay O(room).
    """

    def __init__(self, insight: Insight, info: InsightScheduleInfo, room: int, *, now):
        self.insight, self.info, self.room, self.now = insight, info, room, now
        self.algorithm = insight.scheduling_algorithm
        self.lanes: list[LaneState] = []
        self.customers: dict[object, CustomerLimits] = {}
        self.order: list[int] = []
        self.turns: fairness.Turns | None = None
        self.index_done = False
        self.default_seconds = states.DEFAULT_COST_SECONDS  # kept by `_read_page`
        self._means_total, self._means_count = 0.0, 0  # of the lanes read that have one
        self.after: tuple[float, object] | None = None
        if self.algorithm == Insight.Algorithm.FAIR_SHARE:
            _rebase_if_due(insight, info, now=now)
        self.inflation = states.usage_inflation(
            now=now, epoch=info.usage_epoch, half_life_seconds=insight.usage_half_life_seconds
        )

    def run(self) -> None:
        """Decide the turns: `order` (lane index per turn) and each lane's `rows` to move."""
        self._read_page()
        for _ in range(MAX_PASSES):
            turns = fairness.serve_lanes(
                [self._fair_lane(lane) for lane in self.lanes], self.room, horizon=self._horizon()
            )
            if turns.stopped_at_horizon and not self.index_done:
                self._read_page()
                continue
            short = [
                (lane, count)
                for lane, count in zip(self.lanes, turns.counts, strict=True)
                if count > len(lane.rows) and not lane.exhausted
            ]
            if not short:
                break
            read_rows(self.insight.pk, short)
        self.turns = turns
        self.order = turns.order

    def expected_seconds(self, lane: LaneState) -> float:
        """Fair share's charge for one of the lane's agendas that declares no cost: the lane's
        running mean; for a customer with none yet, the mean of the lanes read that have one
        (what work on this insight usually takes), else states.DEFAULT_COST_SECONDS."""
        if lane.mean_seconds is not None:
            return lane.mean_seconds
        return self.default_seconds

    def _fair_lane(self, lane: LaneState) -> fairness.Lane:
        may_take = min(lane.may_take, len(lane.rows)) if lane.exhausted else lane.may_take
        return fairness.Lane(
            customer_id=lane.customer_id,
            served=lane.served,
            may_take=may_take,
            charge=fairness.lane_charge(
                self.algorithm,
                weight=lane.weight,
                cost_seconds=self.expected_seconds(lane),
                inflation=self.inflation,
            ),
        )

    def _horizon(self) -> tuple | None:
        if self.index_done or not self.lanes:
            return None
        last = self.lanes[-1]
        return fairness.turn_key(last.served, last.customer_id)

    def _read_page(self) -> None:
        """Read the next page of active lanes in turn order with their customers' limits, in
        one statement (a lane whose customer is being deleted has no row to join)."""
        size = self.room + 1
        page = lanes_page(self.insight.pk, self.after, size)
        self.index_done = len(page) < size
        if not page:
            return
        self.after = (page[-1][2], page[-1][1])
        customers = {row[1]: limits_of(*row[4:]) for row in page}
        self.customers.update(customers)
        allowance = cap_allowance(caps_of(customers))
        tokens = rate_limits.customer_tokens(rate_limits_of(customers), now=self.now)
        for pk, customer_id, served, mean_seconds, *_ in page:
            limits = customers[customer_id]
            may_take = 0 if limits.held else self.room
            may_take = max(0, min(may_take, allowance.get(customer_id, may_take)))
            if customer_id in tokens and tokens[customer_id] < may_take:
                may_take = max(0, tokens[customer_id])
                metrics.RATE_LIMITED.labels("customer").inc()
            self.lanes.append(
                LaneState(
                    pk=pk,
                    customer_id=customer_id,
                    served=served,
                    mean_seconds=mean_seconds,
                    weight=limits.weight,
                    cap=limits.cap,
                    may_take=may_take,
                )
            )
            if mean_seconds is not None:
                self._means_total += mean_seconds
                self._means_count += 1
        if self._means_count:
            self.default_seconds = self._means_total / self._means_count


def lanes_page(insight_id: object, after: tuple | None, size: int) -> list[tuple]:
    """Up to `size` active lanes of the insight after `after` (served, customer id) in turn
    order, locked (skipping lanes another fill holds) on PostgreSQL, each as (pk, customer id,
    served, mean seconds, *its customer's `LIMIT_COLUMNS`)."""
    loaders, sql = _lanes_page_query(connection.vendor, after is not None)
    insight_field = CustomerLane._meta.get_field("insight")
    parameters = [insight_field.get_db_prep_value(insight_id, connection)]
    if after is not None:
        served, customer_id = after
        customer_field = CustomerLane._meta.get_field("customer")
        parameters += [served, customer_field.get_db_prep_value(customer_id, connection), served]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*parameters, size])
        rows = cursor.fetchall()
    page = []
    for row in rows:
        lane, customer = load_row(loaders, row)
        limits = (getattr(customer, column) for column in LIMIT_COLUMNS)
        page.append((lane.pk, lane.customer_id, lane.served, lane.mean_seconds, *limits))
    return page


@functools.cache
def _lanes_page_query(vendor: str, after: bool) -> tuple[list[RowLoader], str]:
    """`lanes_page`'s statement and loaders, built once per process: written out (as the ORM
    wrote it) rather than built by the ORM at every page a fill reads."""
    loaders = [
        RowLoader(CustomerLane, "l", frozenset({"id", "customer_id", "served", "mean_seconds"})),
        RowLoader(Customer, "c", frozenset(LIMIT_COLUMNS)),
    ]
    quote = connection.ops.quote_name
    lanes, customers = quote(CustomerLane._meta.db_table), quote(Customer._meta.db_table)
    turn = " AND l.served >= %s AND NOT (l.customer_id <= %s AND l.served = %s)" if after else ""
    lock = " FOR UPDATE OF l SKIP LOCKED" if vendor == "postgresql" else ""
    sql = (
        f"SELECT {select_list(loaders)} "
        f"FROM {lanes} l INNER JOIN {customers} c ON l.customer_id = c.id "
        f"WHERE l.active AND l.insight_id = %s{turn} "
        f"ORDER BY l.served ASC, l.customer_id ASC LIMIT %s{lock}"
    )
    return loaders, sql


# Passes of serve-then-read a fill makes at most; each reads a page or finds a lane's end.
MAX_PASSES = 50
# Rebase fair share's inflated charges before they grow past this factor (2^40 ≈ 1e12).
_REBASE_AT = 2.0**40


def _rebase_if_due(insight: Insight, info: InsightScheduleInfo, *, now: datetime) -> None:
    """Start fair share's decay clock, or divide every lane's service by the inflation reached
    so far and restart it: once per 40 half-lives, O(lanes of the insight)."""
    if info.usage_epoch is None:
        info.usage_epoch = now
        return
    inflation = states.usage_inflation(
        now=now, epoch=info.usage_epoch, half_life_seconds=insight.usage_half_life_seconds
    )
    if inflation < _REBASE_AT:
        return
    CustomerLane.objects.filter(insight_id=insight.pk).update(served=F("served") / inflation)
    info.virtual_time /= inflation
    info.usage_epoch = now


def lane_picks(fill: "LaneFill") -> list[fairness.ReadyCandidate]:
    """The picked rows in turn order (queue positions interleave customers as turns did)."""
    taken = [0] * len(fill.lanes)
    picks = []
    for index in fill.order:
        picks.append(fill.lanes[index].rows[taken[index]])
        taken[index] += 1
    return picks


def lanes_record(
    insight: Insight,
    info: InsightScheduleInfo,
    fill: "LaneFill",
    moved: list[fairness.ReadyCandidate],
    *,
    now: datetime,
) -> ServedLanes:
    """Charge each served lane for the agendas it really moved, move the lanes that could take
    nothing (held, capped, rate-limited) up to the frontier (a turn missed is not owed later),
    advance the insight's virtual time and make the lanes found empty inactive. Returns the
    lanes' new levels, for `_fill_record` to write with the schedule info."""
    costs = {}
    if fill.algorithm == Insight.Algorithm.FAIR_SHARE and moved:
        costs = dict(
            Agenda.objects.filter(pk__in=[pick.agenda_id for pick in moved], cost__isnull=False)
            .values_list("pk", "cost")
            .order_by()
        )
    moved_by_lane: dict[object, list[fairness.ReadyCandidate]] = {}
    for pick in moved:
        moved_by_lane.setdefault(pick.customer_id, []).append(pick)
    frontier = fill.turns.frontier
    if frontier is None and fill.lanes:
        frontier = min(lane.served for lane in fill.lanes)
    changed: ServedLanes = {}
    charging = fill.algorithm == Insight.Algorithm.FAIR_SHARE
    for lane in fill.lanes:
        served, pending = lane.served, 0.0
        picks = moved_by_lane.get(lane.customer_id, ())
        for pick in picks:
            seconds = costs.get(pick.agenda_id, fill.expected_seconds(lane))
            pending += seconds
            served += fairness.lane_charge(
                fill.algorithm, weight=lane.weight, cost_seconds=seconds, inflation=fill.inflation
            )
        if lane.may_take == 0 and frontier is not None:
            served = max(served, frontier)
        if served != lane.served:
            changed[lane.pk] = (served, pending, len(picks)) if charging else (served, 0.0, 0)
    if frontier is not None:
        # Not a running maximum: fair share's corrections can lower every lane's service
        # (work that ran shorter than charged), and a lane waking at an old high mark would
        # wait behind them for as long as it took them to climb back.
        info.virtual_time = frontier
    moved_count = {customer: len(picks) for customer, picks in moved_by_lane.items()}
    states.lanes_sleep(
        insight.pk,
        [
            lane.customer_id
            for lane in fill.lanes
            if lane.exhausted and moved_count.get(lane.customer_id, 0) >= len(lane.rows)
        ],
    )
    return changed


# Each lane's best k rows, read straight off the (insight, customer, -priority, added_at)
# index: k rows per lane, however long its backlog.
_LATERAL_SQL = """
SELECT c.customer_id, r.agenda_id, r.priority, r.added_at
FROM unnest(%s::uuid[], %s::int[]) WITH ORDINALITY AS c(customer_id, k, ord)
CROSS JOIN LATERAL (
    SELECT agenda_id, priority, added_at FROM {table}
    WHERE insight_id = %s AND customer_id = c.customer_id
    ORDER BY priority DESC, added_at
    LIMIT c.k
) r
ORDER BY c.ord, r.priority DESC, r.added_at
"""


def read_rows(insight_id: object, wanted: list[tuple[LaneState, int]]) -> None:
    """Read each lane's first `k` ready rows (priority desc, then oldest) into `lane.rows`;
    a lane with fewer is `exhausted`."""
    wanted = [(lane, k) for lane, k in wanted if k > 0]
    if not wanted:
        return
    rows: dict[object, list[fairness.ReadyCandidate]] = {lane.customer_id: [] for lane, _ in wanted}
    if database_is_postgresql():
        table = connection.ops.quote_name(ReadyAgenda._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                _LATERAL_SQL.format(table=table),
                [[str(lane.customer_id) for lane, _ in wanted], [k for _, k in wanted], insight_id],
            )
            for customer_id, agenda_id, priority, added_at in cursor.fetchall():
                rows[customer_id].append(_candidate(agenda_id, customer_id, priority, added_at))
    else:
        for lane, k in wanted:
            for agenda_id, priority, added_at in (
                ReadyAgenda.objects.filter(insight_id=insight_id, customer_id=lane.customer_id)
                .order_by("-priority", "added_at")
                .values_list("agenda_id", "priority", "added_at")[:k]
            ):
                rows[lane.customer_id].append(
                    _candidate(agenda_id, lane.customer_id, priority, added_at)
                )
    for lane, k in wanted:
        lane.rows = rows[lane.customer_id]
        lane.exhausted = len(lane.rows) < k


def _candidate(
    agenda_id: object, customer_id: object, priority: int, added_at: datetime
) -> fairness.ReadyCandidate:
    return fairness.ReadyCandidate(
        agenda_id=agenda_id, customer_id=customer_id, priority=priority, added_at=added_at
    )
