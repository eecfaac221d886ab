"""Fill (docs/design.md §6.1): move ready agendas into an insight's queue, fairly across customers.

Runs under the insight's try-lock; every state change goes through agendas.states.
"""

import functools
import logging
import math
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef
from django.utils import timezone

from agendas import states
from agendas.models import Execution
from core.prepared_statements import unprepared_statements
from core.rows import RowLoader, load_row, select_list
from resourcepools.models import Insight
from scheduling import fairness, metrics, rate_limits
from scheduling.fill_lanes import (
    MAX_PASSES,
    LaneFill,
    LaneState,
    ServedLanes,
    lane_picks,
    lanes_record,
    read_rows,
)
from scheduling.fill_limits import (
    cap_allowance,
    caps_of,
    customer_limits,
    rate_limits_of,
    within_caps,
)
from scheduling.locks import (
    FILL_LOCK_WAITERS_SQL,
    database_is_postgresql,
    fill_lock_key,
    insight_fill_try_lock,
)
from scheduling.models import CustomerLane, InsightScheduleInfo, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.scheduling")


# The most a fill's pace (`fill_pace`) adds to its room, whatever the rate.
PACE_MAX_ROWS = 1000


@dataclass(frozen=True)
class FillResult:
    insight_id: object
    moved: int = 0
    room: int = 0
    skipped: bool = False  # another filler holds the insight's lock


def fill_pace(*, taken: int, seconds: float, pace_seconds: float) -> int:
    """What a fill adds to its room for the `taken` rows pulls took from the queue in the
    `seconds` since the previous fill: all of them, scaled down to `pace_seconds` of them at
    the same rate when more time has passed, at most PACE_MAX_ROWS.

    Only fills add queue rows, so the rows gone since the previous fill are what pulls took
    (or aborts removed). The queue then holds, beyond `queue_size`, about what its pulls take
    before the next fill: pulls that drain a short queue find it stocked instead of each
    filling it inline in turn, while a slow insight's queue stays at `queue_size`
    (docs/design.md §6.1, "Room")."""
    if taken <= 0 or pace_seconds <= 0:
        return 0
    share = min(1.0, pace_seconds / seconds) if seconds > 0 else 1.0
    return min(PACE_MAX_ROWS, math.floor(taken * share))


def insight_fill(
    *,
    insight_id: object,
    now: datetime | None = None,
    appetite: int = 0,
    locked: bool = False,
    appetite_per_waiting_pull: int = 0,
) -> FillResult:
    """Move up to `room` ready agendas of the insight into its queue, fairly, in one transaction.

    `appetite`: agendas a pull that came up short is about to claim (`scheduling.pull`); the
    room grows by that many, so they pass through the queue without leaving it short for the
    next pull. What waits there once they are claimed is still at most `queue_size`.
    `appetite_per_waiting_pull` (PostgreSQL, with `locked`): the room grows by that many more
    for each pull waiting for the fill lock now, each about to claim as soon as this fill
    commits; one fill serves the pulls queued behind it instead of each filling in turn. The
    queue holds more than `queue_size` only until those pulls have claimed; one that asked
    fewer, or stopped waiting, leaves the rest to the next pulls (docs/design.md §6.3).
    The room also grows by what pulls took from the queue since the previous fill, at most
    POP_FILL_PACE_SECONDS of it at their rate (`fill_pace`).

    Takes the insight's advisory try-lock (a concurrent filler returns `skipped`; `locked`: the
    caller, a pull, already holds the lock in its transaction, which this one joins) and locks its
    InsightScheduleInfo row, the lanes it serves and the moved progress rows. Reads O(room)
    lanes and ready rows whatever the number of customers with ready work (docs/design.md §6.1).
    """
    now = now or timezone.now()
    # Planned with its values every time, also inline in a pull (core/prepared_statements.py).
    # Inside a caller's transaction (a pull that claims in the same one) it adds no savepoint:
    # an error here ends the caller's transaction too.
    with unprepared_statements(), transaction.atomic(savepoint=False):
        if not locked and not insight_fill_try_lock(insight_id):
            return FillResult(insight_id=insight_id, skipped=True)
        count_waiting = bool(appetite_per_waiting_pull) and database_is_postgresql()
        info, queued, waiting = _schedule_info_locked(insight_id, count_waiting=count_waiting)
        insight = info.insight if info is not None else None
        if insight is None or insight.paused:
            return FillResult(insight_id=insight_id)  # deleted since the nudge, or paused
        appetite = max(appetite, 0) + waiting * max(appetite_per_waiting_pull, 0)
        if info.last_fill_at is not None:
            appetite += fill_pace(
                taken=info.last_fill_queue_after - queued,
                seconds=(now - info.last_fill_at).total_seconds(),
                pace_seconds=settings.POP_FILL_PACE_SECONDS,
            )
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
            customers = customer_limits({pick.customer_id for pick in picks})
        else:
            lanes = LaneFill(insight, info, room, now=now)
            lanes.run()
            picks = lane_picks(lanes)
            customers = lanes.customers
        caps, limits = caps_of(customers), rate_limits_of(customers)
        picks = within_caps(picks, caps)
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
            served = lanes_record(insight, info, lanes, moved_picks, now=now)
        info.next_position += len(moved)
        info.last_fill_at = now
        info.last_fill_count = len(moved)
        info.last_fill_queue_after = queued + len(moved)
        _fill_record(info, served)
    if moved:
        metrics.FILLS.labels(insight.name).inc()
        metrics.FILLED_AGENDAS.labels(insight.name).inc(len(moved))
    return FillResult(insight_id=insight_id, moved=len(moved), room=room)


_INFO_FIELDS = [
    "next_position",
    "virtual_time",
    "usage_epoch",
    "last_fill_at",
    "last_fill_count",
    "last_fill_queue_after",
]


def _fill_record(info: InsightScheduleInfo, served: ServedLanes) -> None:
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
    for _ in range(MAX_PASSES):
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
        customers = customer_limits(set(slots))
        allowance = cap_allowance(caps_of(customers))
        tokens = rate_limits.customer_tokens(rate_limits_of(customers), now=now)
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
            lanes.append(LaneState(0, customer_id, 0.0, None, 1, None, may_take=may))
        read_rows(
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


def _schedule_info_locked(
    insight_id: object, *, count_waiting: bool = False
) -> tuple[InsightScheduleInfo | None, int, int]:
    """The insight's schedule info, locked, with its insight, the queue's length and (with
    `count_waiting`, PostgreSQL) the pulls waiting for its fill lock: one statement once the
    info row exists (made here at the insight's first fill). None when the insight is gone."""
    loaders, sql = _schedule_info_query(connection.vendor, count_waiting)
    key = InsightScheduleInfo._meta.get_field("insight").get_db_prep_value(insight_id, connection)
    waiting_params = fill_lock_key(insight_id) if count_waiting else []
    with connection.cursor() as cursor:
        cursor.execute(sql, [*waiting_params, key])
        row = cursor.fetchone()
    if row is not None:
        info, insight = load_row(loaders, row)
        info.insight = insight
        columns = len(row) - (2 if count_waiting else 1)
        return info, row[columns], row[columns + 1] if count_waiting else 0
    insight = Insight.objects.filter(pk=insight_id).first()
    if insight is None:
        return None, 0, 0
    info, _ = InsightScheduleInfo.objects.select_for_update().get_or_create(insight=insight)
    return info, QueuedAgenda.objects.filter(insight_id=insight_id).count(), 0


@functools.cache
def _schedule_info_query(vendor: str, count_waiting: bool) -> tuple[list[RowLoader], str]:
    """`_schedule_info_locked`'s statement and loaders, built once per process: written out
    rather than built by the ORM at every fill (a quarter of a small fill's time)."""
    loaders = [RowLoader(InsightScheduleInfo, "s"), RowLoader(Insight, "i")]
    quote = connection.ops.quote_name
    info, insight, queue = (
        quote(model._meta.db_table) for model in (InsightScheduleInfo, Insight, QueuedAgenda)
    )
    lock = " FOR UPDATE OF s" if vendor == "postgresql" else ""
    waiting = f", {FILL_LOCK_WAITERS_SQL}" if count_waiting else ""
    sql = (
        f"SELECT {select_list(loaders)}, "
        f"(SELECT COUNT(*) FROM {queue} q WHERE q.insight_id = s.insight_id){waiting} "
        f"FROM {info} s JOIN {insight} i ON i.id = s.insight_id "
        f"WHERE s.insight_id = %s{lock}"
    )
    return loaders, sql


def _fill_room(insight: Insight, *, queued: int, appetite: int = 0) -> int:
    room = insight.queue_size - queued + max(appetite, 0)
    if insight.execution_limit is not None:
        executing = Execution.objects.filter(insight_id=insight.pk, outcome__isnull=True).count()
        room = min(room, insight.execution_limit - executing - queued)
    return room


def _count_by_customer(picks: list[fairness.ReadyCandidate]) -> dict[object, int]:
    counts: dict[object, int] = {}
    for pick in picks:
        counts[pick.customer_id] = counts.get(pick.customer_id, 0) + 1
    return counts
