"""Fill (docs/design.md §6.1): move ready agendas into an insight's queue, fairly across customers.

Runs under the insight's try-lock; every state change goes through agendas.states.
"""

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from agendas import states
from agendas.models import Agenda, Execution
from core.prepared_statements import unprepared_statements
from resourcepools.models import Customer, Insight
from scheduling import fairness, metrics, rate_limits
from scheduling.locks import customer_cap_locks, database_is_postgresql, insight_fill_try_lock
from scheduling.models import CustomerLane, InsightScheduleInfo, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.scheduling")


@dataclass(frozen=True)
class FillResult:
    insight_id: object
    moved: int = 0
    room: int = 0
    skipped: bool = False  # another filler holds the insight's lock


@dataclass
class _LaneState:
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
_ServedLanes = dict[int, tuple[float, float, int]]


def insight_fill(
    *, insight_id: object, now: datetime | None = None, appetite: int = 0
) -> FillResult:
    """Move up to `room` ready agendas of the insight into its queue, fairly, in one transaction.

    `appetite`: agendas a pull that came up short is about to claim (`scheduling.pull`); the
    room grows by that many, so they pass through the queue without leaving it short for the
    next pull. What waits there once they are claimed is still at most `queue_size`.

    Takes the insight's advisory try-lock (a concurrent filler returns `skipped`) and locks its
    InsightScheduleInfo row, the lanes it serves and the moved progress rows. Reads O(room)
    lanes and ready rows whatever the number of customers with ready work (docs/design.md §6.1).
    """
    now = now or timezone.now()
    # Planned with its values every time, also inline in a pull (core/prepared_statements.py).
    with unprepared_statements(), transaction.atomic():
        if not insight_fill_try_lock(insight_id):
            return FillResult(insight_id=insight_id, skipped=True)
        info, queued = _schedule_info_locked(insight_id)
        insight = info.insight if info is not None else None
        if insight is None or insight.paused:
            return FillResult(insight_id=insight_id)  # deleted since the nudge, or paused
        room = _fill_room(insight, queued=queued, appetite=appetite)
        insight_bucket, insight_tokens = rate_limits.insight_tokens(insight, now=now)
        if insight_tokens < room:
            room = insight_tokens
            metrics.RATE_LIMITED.labels("insight").inc()
        if room <= 0:
            return FillResult(insight_id=insight_id, room=max(room, 0))
        lanes = None
        if insight.scheduling_algorithm == Insight.Algorithm.FIFO:
            picks = _fifo_picks(insight, room, now=now)
            customers = _customer_limits({pick.customer_id for pick in picks})
        else:
            lanes = _LaneFill(insight, info, room, now=now)
            lanes.run()
            picks = _lane_picks(lanes)
            customers = lanes.customers
        caps = {pk: c.cap for pk, c in customers.items() if c.cap is not None}
        limits = {pk: c.limit for pk, c in customers.items() if c.limit is not None}
        picks = _within_caps(picks, caps)
        picks, buckets = rate_limits.within_customer_limits(picks, limits, now=now)
        moved = states.progress_queue_many(
            insight_id=insight.pk,
            entries=[(pick.agenda_id, pick.customer_id) for pick in picks],
            first_position=info.next_position,
            now=now,
        )
        moved_set = set(moved)
        moved_picks = [pick for pick in picks if pick.agenda_id in moved_set]
        rate_limits.insight_take(insight, insight_bucket, len(moved), now=now)
        rate_limits.customers_take(buckets, limits, _count_by_customer(moved_picks), now=now)
        served = {}
        if lanes is not None:
            served = _lanes_record(insight, info, lanes, moved_picks, now=now)
        info.next_position += len(moved)
        info.last_fill_at = now
        info.last_fill_count = len(moved)
        _fill_record(info, served)
    if moved:
        metrics.FILLS.labels(insight.name).inc()
        metrics.FILLED_AGENDAS.labels(insight.name).inc(len(moved))
    return FillResult(insight_id=insight_id, moved=len(moved), room=room)


@dataclass(frozen=True)
class _CustomerLimits:
    weight: int
    cap: int | None
    held: bool
    limit: tuple[int, int] | None  # rate limit: (agendas, period seconds)


# A customer's fill limits, in `_limits`' order: as read from Customer, and from a lane.
_LIMIT_COLUMNS = ("weight", "max_executing", "held", "rate_limit", "rate_period_seconds")
_LIMIT_COLUMNS_OF_LANE = tuple(f"customer__{column}" for column in _LIMIT_COLUMNS)


def _limits(
    weight: int, cap: int | None, held: bool, rate_limit: int | None, period: int
) -> _CustomerLimits:
    return _CustomerLimits(
        weight=weight,
        cap=cap,
        held=held,
        limit=(rate_limit, period) if rate_limit is not None else None,
    )


def _customer_limits(customer_ids: set[object]) -> dict[object, _CustomerLimits]:
    if not customer_ids:
        return {}
    rows = Customer.objects.filter(pk__in=customer_ids).values_list("pk", *_LIMIT_COLUMNS)
    return {pk: _limits(*limits) for pk, *limits in rows}


class _LaneFill:
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
        self.lanes: list[_LaneState] = []
        self.customers: dict[object, _CustomerLimits] = {}
        self.order: list[int] = []
        self.turns: fairness.Turns | None = None
        self.index_done = False
        self.after: tuple[float, object] | None = None
        if self.algorithm == Insight.Algorithm.FAIR_SHARE:
            _rebase_if_due(insight, info, now=now)
        self.inflation = states.usage_inflation(
            now=now, epoch=info.usage_epoch, half_life_seconds=insight.usage_half_life_seconds
        )

    def run(self) -> None:
        """Decide the turns: `order` (lane index per turn) and each lane's `rows` to move."""
        self._read_page()
        for _ in range(_MAX_PASSES):
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
            _read_rows(self.insight.pk, short)
        self.turns = turns
        self.order = turns.order

    def expected_seconds(self, lane: _LaneState) -> float:
        """Fair share's charge for one of the lane's agendas that declares no cost: the lane's
        running mean; for a customer with none yet, the mean of the lanes read that have one
        (what work on this insight usually takes), else states.DEFAULT_COST_SECONDS."""
        if lane.mean_seconds is not None:
            return lane.mean_seconds
        known = [other.mean_seconds for other in self.lanes if other.mean_seconds is not None]
        return sum(known) / len(known) if known else states.DEFAULT_COST_SECONDS

    def _fair_lane(self, lane: _LaneState) -> fairness.Lane:
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
        query = CustomerLane.objects.filter(insight_id=self.insight.pk, active=True)
        if self.after is not None:
            served, customer_id = self.after
            query = query.filter(served__gte=served).exclude(
                served=served, customer_id__lte=customer_id
            )
        if database_is_postgresql():
            query = query.select_for_update(skip_locked=True, of=("self",))
        size = self.room + 1
        page = list(
            query.order_by("served", "customer_id").values_list(
                "pk", "customer_id", "served", "mean_seconds", *_LIMIT_COLUMNS_OF_LANE
            )[:size]
        )
        self.index_done = len(page) < size
        if not page:
            return
        self.after = (page[-1][2], page[-1][1])
        customers = {row[1]: _limits(*row[4:]) for row in page}
        self.customers.update(customers)
        caps = {pk: c.cap for pk, c in customers.items() if c.cap is not None}
        allowance = _cap_allowance(caps)
        tokens = rate_limits.customer_tokens(
            {pk: c.limit for pk, c in customers.items() if c.limit is not None}, now=self.now
        )
        for pk, customer_id, served, mean_seconds, *_ in page:
            limits = customers[customer_id]
            may_take = 0 if limits.held else self.room
            may_take = max(0, min(may_take, allowance.get(customer_id, may_take)))
            if customer_id in tokens and tokens[customer_id] < may_take:
                may_take = max(0, tokens[customer_id])
                metrics.RATE_LIMITED.labels("customer").inc()
            self.lanes.append(
                _LaneState(
                    pk=pk,
                    customer_id=customer_id,
                    served=served,
                    mean_seconds=mean_seconds,
                    weight=limits.weight,
                    cap=limits.cap,
                    may_take=may_take,
                )
            )


# Passes of serve-then-read a fill makes at most; each reads a page or finds a lane's end.
_MAX_PASSES = 50
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


def _lane_picks(fill: "_LaneFill") -> list[fairness.ReadyCandidate]:
    """The picked rows in turn order (queue positions interleave customers as turns did)."""
    taken = [0] * len(fill.lanes)
    picks = []
    for index in fill.order:
        picks.append(fill.lanes[index].rows[taken[index]])
        taken[index] += 1
    return picks


def _lanes_record(
    insight: Insight,
    info: InsightScheduleInfo,
    fill: "_LaneFill",
    moved: list[fairness.ReadyCandidate],
    *,
    now: datetime,
) -> _ServedLanes:
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
    changed: _ServedLanes = {}
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


_INFO_FIELDS = ["next_position", "virtual_time", "usage_epoch", "last_fill_at", "last_fill_count"]


def _fill_record(info: InsightScheduleInfo, served: _ServedLanes) -> None:
    """Write what the fill decided: each served lane's new `served` plus its pending charges,
    and the insight's schedule info (`_INFO_FIELDS`). On PostgreSQL one statement: the lanes'
    UPDATE … FROM unnest as a data-modifying CTE of the info's UPDATE."""
    if not served or not database_is_postgresql():
        for pk, (level, seconds, count) in served.items():
            CustomerLane.objects.filter(pk=pk).update(
                served=level,
                pending_charge=F("pending_charge") + seconds,
                pending_count=F("pending_count") + count,
            )
        info.save(update_fields=_INFO_FIELDS)
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH lanes AS (UPDATE {quote(CustomerLane._meta.db_table)} l "
            "SET served = v.served, pending_charge = l.pending_charge + v.seconds, "
            "pending_count = l.pending_count + v.count "
            "FROM unnest(%s::bigint[], %s::float8[], %s::float8[], %s::int[]) "
            "AS v(id, served, seconds, count) WHERE l.id = v.id RETURNING 1) "
            f"UPDATE {quote(InsightScheduleInfo._meta.db_table)} SET "
            + ", ".join(f"{quote(name)} = %s" for name in _INFO_FIELDS)
            + " WHERE id = %s",
            [
                list(served),
                [value[0] for value in served.values()],
                [value[1] for value in served.values()],
                [value[2] for value in served.values()],
                *(getattr(info, name) for name in _INFO_FIELDS),
                info.pk,
            ],
        )


def _fifo_picks(insight: Insight, room: int, *, now: datetime) -> list[fairness.ReadyCandidate]:
    """The oldest ready agendas across customers, priority first within each customer: the
    customers owning the oldest rows get that many slots each, filled in their priority order
    (`pick_fifo`). Rows of customers that can take nothing now are read past, a page at a
    time."""
    picks: list[fairness.ReadyCandidate] = []
    blocked: set[object] = set()
    after = None
    for _ in range(_MAX_PASSES):
        query = ReadyAgenda.objects.filter(insight_id=insight.pk).exclude(customer_id__in=blocked)
        if after is not None:
            query = query.filter(added_at__gte=after[0]).exclude(
                added_at=after[0], agenda_id__lte=after[1]
            )
        want = room - len(picks)
        oldest = list(
            query.order_by("added_at", "agenda_id").values_list(
                "agenda_id", "customer_id", "added_at"
            )[:want]
        )
        if not oldest:
            break
        after = (oldest[-1][2], oldest[-1][0])
        slots: dict[object, int] = {}
        for _, customer_id, _ in oldest:
            slots[customer_id] = slots.get(customer_id, 0) + 1
        customers = _customer_limits(set(slots))
        allowance = _cap_allowance({pk: c.cap for pk, c in customers.items() if c.cap is not None})
        tokens = rate_limits.customer_tokens(
            {pk: c.limit for pk, c in customers.items() if c.limit is not None}, now=now
        )
        taken = _count_by_customer(picks)
        lanes = []
        for customer_id, count in slots.items():
            limits = customers.get(customer_id)
            may = 0 if limits is None or limits.held else count
            may = min(may, allowance.get(customer_id, may) - taken.get(customer_id, 0))
            may = min(may, tokens.get(customer_id, may) - taken.get(customer_id, 0))
            if may <= 0:
                blocked.add(customer_id)
                continue
            lanes.append(_LaneState(0, customer_id, 0.0, None, 1, None, may_take=may))
        _read_rows(
            insight.pk,
            [(lane, taken.get(lane.customer_id, 0) + lane.may_take) for lane in lanes],
        )
        have = {pick.agenda_id for pick in picks}
        candidates = {
            lane.customer_id: [row for row in lane.rows if row.agenda_id not in have][
                : lane.may_take
            ]
            for lane in lanes
        }
        picks += fairness.pick_fifo(candidates, want)
        if len(picks) >= room:
            break
    return picks


def insights_to_fill() -> list[object]:
    """Ids of the insights whose queue has room and that have ready work (the periodic fill)."""
    return list(
        Insight.objects.filter(paused=False)
        .annotate(queued=Count("queued_agendas"))
        .filter(queued__lt=F("queue_size"))
        .filter(Exists(ReadyAgenda.objects.filter(insight_id=OuterRef("pk"))))
        .values_list("pk", flat=True)
    )


def insights_fill(*, now: datetime | None = None) -> int:
    """Fill every insight that has room and ready work; return the agendas moved."""
    return sum(insight_fill(insight_id=pk, now=now).moved for pk in insights_to_fill())


def _schedule_info_locked(insight_id: object) -> tuple[InsightScheduleInfo | None, int]:
    """The insight's schedule info, locked, with its insight and the queue's length: one
    statement once the info row exists (made here at the insight's first fill). None when the
    insight is gone."""
    queued = (
        QueuedAgenda.objects.filter(insight_id=OuterRef("insight_id"))
        .order_by()
        .values("insight_id")
        .annotate(n=Count("pk"))
        .values("n")
    )
    info = (
        InsightScheduleInfo.objects.select_for_update(of=("self",))
        .select_related("insight")
        .annotate(queued=Coalesce(Subquery(queued), 0))
        .filter(insight_id=insight_id)
        .first()
    )
    if info is not None:
        return info, info.queued
    insight = Insight.objects.filter(pk=insight_id).first()
    if insight is None:
        return None, 0
    info, _ = InsightScheduleInfo.objects.select_for_update().get_or_create(insight=insight)
    return info, QueuedAgenda.objects.filter(insight_id=insight_id).count()


def _fill_room(insight: Insight, *, queued: int, appetite: int = 0) -> int:
    room = insight.queue_size - queued + max(appetite, 0)
    if insight.execution_limit is not None:
        executing = Execution.objects.filter(insight_id=insight.pk, outcome__isnull=True).count()
        room = min(room, insight.execution_limit - executing - queued)
    return room


def _cap_allowance(caps: dict[object, int]) -> dict[object, int]:
    """For customers with `max_executing`, how many more they may have queued or executing."""
    if not caps:
        return {}
    queued = dict(
        QueuedAgenda.objects.filter(customer_id__in=list(caps))
        .values_list("customer_id")
        .annotate(n=Count("pk"))
        .values_list("customer_id", "n")
        .order_by()
    )
    executing = dict(
        Execution.objects.filter(customer_id__in=list(caps), outcome__isnull=True)
        .values_list("customer_id")
        .annotate(n=Count("pk"))
        .values_list("customer_id", "n")
        .order_by()
    )
    return {pk: cap - queued.get(pk, 0) - executing.get(pk, 0) for pk, cap in caps.items()}


def _within_caps(
    picks: list[fairness.ReadyCandidate], caps: dict[object, int]
) -> list[fairness.ReadyCandidate]:
    """The picks that keep every capped customer within `max_executing`, counted again under
    the customers' cap locks: a fill of another insight that admitted the same customer's work
    a moment ago has committed by the time the lock is ours, so its rows are counted. Held to
    the end of this fill's transaction (docs/design.md §6.1)."""
    capped = {pick.customer_id for pick in picks if pick.customer_id in caps}
    if not capped:
        return picks
    customer_cap_locks(list(capped))
    allowance = _cap_allowance({pk: caps[pk] for pk in capped})
    kept = []
    for pick in picks:
        if pick.customer_id in allowance:
            if allowance[pick.customer_id] <= 0:
                continue
            allowance[pick.customer_id] -= 1
        kept.append(pick)
    return kept


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


def _read_rows(insight_id: object, wanted: list[tuple[_LaneState, int]]) -> None:
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


def _count_by_customer(picks: list[fairness.ReadyCandidate]) -> dict[object, int]:
    counts: dict[object, int] = {}
    for pick in picks:
        counts[pick.customer_id] = counts.get(pick.customer_id, 0) + 1
    return counts
