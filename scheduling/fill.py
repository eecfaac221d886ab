"""Fill (docs/design.md §6.1): move ready agendas into an insight's queue, fairly across customers.

Runs under the insight's try-lock; every state change goes through agendas.states.
"""

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count, Exists, F, OuterRef
from django.utils import timezone

from agendas import states
from agendas.models import Execution
from resourcepools.models import Customer, Insight
from scheduling import fairness, metrics, rate_limits
from scheduling.locks import customer_cap_locks, database_is_postgresql, insight_fill_try_lock
from scheduling.models import InsightScheduleInfo, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.scheduling")


@dataclass(frozen=True)
class FillResult:
    insight_id: object
    moved: int = 0
    room: int = 0
    skipped: bool = False  # another filler holds the insight's lock


@dataclass
class _Candidates:
    """Per customer, its best ready agendas in order (priority desc, then oldest)."""

    by_customer: dict[object, list[fairness.ReadyCandidate]] = field(default_factory=dict)
    limits: dict[object, int] = field(default_factory=dict)

    def exhausted(self, picked: dict[object, int]) -> list[object]:
        """Customers whose every row read was picked, and who may have more we never read."""
        return [
            customer_id
            for customer_id, rows in self.by_customer.items()
            if rows
            and len(rows) >= self.limits.get(customer_id, 0)
            and picked.get(customer_id, 0) >= len(rows)
        ]


def insight_fill(*, insight_id: object, now: datetime | None = None) -> FillResult:
    """Move up to `room` ready agendas of the insight into its queue, fairly, in one transaction.

    Takes the insight's advisory try-lock (a concurrent filler returns `skipped`), locks its
    InsightScheduleInfo row and the moved progress rows. Reads O(customers with ready work +
    room) ready rows, never a customer's whole backlog.
    """
    now = now or timezone.now()
    with transaction.atomic():
        if not insight_fill_try_lock(insight_id):
            return FillResult(insight_id=insight_id, skipped=True)
        insight = Insight.objects.filter(pk=insight_id).first()
        if insight is None or insight.paused:
            return FillResult(insight_id=insight_id)  # deleted since the nudge, or paused
        info, _ = InsightScheduleInfo.objects.select_for_update().get_or_create(insight=insight)
        room = _fill_room(insight)
        insight_bucket, insight_tokens = rate_limits.insight_tokens(insight, now=now)
        if insight_tokens < room:
            room = insight_tokens
            metrics.RATE_LIMITED.labels("insight").inc()
        if room <= 0:
            return FillResult(insight_id=insight_id, room=max(room, 0))
        customer_ids = _customers_with_ready_work(insight.pk)
        if not customer_ids:
            return FillResult(insight_id=insight_id, room=room)
        rows = Customer.objects.filter(pk__in=customer_ids, held=False).values_list(
            "pk", "weight", "max_executing", "rate_limit", "rate_period_seconds"
        )
        customers, limits = {}, {}
        for pk, weight, cap, rate_limit, rate_period in rows:
            customers[pk] = (weight, cap)
            if rate_limit is not None:
                limits[pk] = (rate_limit, rate_period)
        customer_ids = [pk for pk in customer_ids if pk in customers]  # held ones wait
        if not customer_ids:
            return FillResult(insight_id=insight_id, room=room)
        allowance = _cap_allowance(
            {pk: cap for pk, (_, cap) in customers.items() if cap is not None}
        )
        tokens = rate_limits.customer_tokens(limits, now=now)
        # What each customer may take now: the room, less for one near its max_executing cap
        # or short of rate-limit tokens.
        takes = {
            pk: max(0, min(room, allowance.get(pk, room), tokens.get(pk, room)))
            for pk in customer_ids
        }
        if any(tokens[pk] < min(room, allowance.get(pk, room)) for pk in tokens):
            metrics.RATE_LIMITED.labels("customer").inc()
        # Read about room/customers rows each. While the picker takes every row read of some
        # customer that has more, its choice may be wrong (fifo: that customer's next row may
        # be older than a pick; weighted: it may deserve more): re-read just those customers
        # with twice the limit and pick again. Rows read stay within a small multiple of
        # customers + room, however long any backlog is.
        share = math.ceil(room / len(customer_ids)) + 1
        candidates = _Candidates(by_customer={pk: [] for pk in customer_ids})
        _read_candidates(insight.pk, candidates, {pk: min(share, k) for pk, k in takes.items()})
        weights = {str(pk): customers[pk][0] for pk in customer_ids if pk in customers}
        while True:
            picks, state = _pick(insight, info, candidates, room, weights)
            if len(picks) >= room and insight.scheduling_algorithm == Insight.Algorithm.ROUND_ROBIN:
                break  # one per customer per round: nobody can be short-changed at full room
            emptied = candidates.exhausted(_count_by_customer(picks))
            more = {
                pk: min(takes[pk], candidates.limits[pk] * 2)
                for pk in emptied
                if takes[pk] > candidates.limits[pk]
            }
            if not more:
                break
            _read_candidates(insight.pk, candidates, more)
        picks = _within_caps(
            picks, {pk: cap for pk, (_, cap) in customers.items() if cap is not None}
        )
        picks, buckets = rate_limits.within_customer_limits(picks, limits, now=now)
        moved = states.progress_queue_many(
            insight_id=insight.pk,
            entries=[(pick.agenda_id, pick.customer_id) for pick in picks],
            first_position=info.next_position,
            now=now,
        )
        moved_set = set(moved)
        rate_limits.insight_take(insight, insight_bucket, len(moved), now=now)
        rate_limits.customers_take(
            buckets,
            limits,
            _count_by_customer([pick for pick in picks if pick.agenda_id in moved_set]),
            now=now,
        )
        info.next_position += len(moved)
        info.pending_customer_ids = state.get("pending_customer_ids", info.pending_customer_ids)
        info.deficits = state.get("deficits", info.deficits)
        info.last_fill_at = now
        info.last_fill_count = len(moved)
        info.save(
            update_fields=[
                "next_position",
                "pending_customer_ids",
                "deficits",
                "last_fill_at",
                "last_fill_count",
            ]
        )
    if moved:
        metrics.FILLS.labels(insight.name).inc()
        metrics.FILLED_AGENDAS.labels(insight.name).inc(len(moved))
    return FillResult(insight_id=insight_id, moved=len(moved), room=room)


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


def _fill_room(insight: Insight) -> int:
    queued = QueuedAgenda.objects.filter(insight_id=insight.pk).count()
    room = insight.queue_size - queued
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


# Skip scan: one index probe per distinct customer of the insight, instead of reading every
# ready row (DISTINCT) or ranking them all (window function). docs/design.md §6.1 has the figures.
_SKIP_SCAN_SQL = """
WITH RECURSIVE customers(customer_id) AS (
    (SELECT customer_id FROM {table} WHERE insight_id = %s ORDER BY customer_id LIMIT 1)
    UNION ALL
    SELECT (SELECT r.customer_id FROM {table} r
            WHERE r.insight_id = %s AND r.customer_id > c.customer_id
            ORDER BY r.customer_id LIMIT 1)
    FROM customers c WHERE c.customer_id IS NOT NULL
)
SELECT customer_id FROM customers WHERE customer_id IS NOT NULL
"""
# Each customer's best k rows, read straight off the (insight, customer, -priority, added_at)
# index: k rows per customer, however long its backlog.
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


def _customers_with_ready_work(insight_id: object) -> list[object]:
    table = connection.ops.quote_name(ReadyAgenda._meta.db_table)
    if database_is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(_SKIP_SCAN_SQL.format(table=table), [insight_id, insight_id])
            return [row[0] for row in cursor.fetchall()]
    return list(
        ReadyAgenda.objects.filter(insight_id=insight_id)
        .order_by("customer_id")
        .values_list("customer_id", flat=True)
        .distinct()
    )


def _read_candidates(
    insight_id: object, candidates: _Candidates, limits: dict[object, int]
) -> None:
    candidates.limits.update(limits)
    limits = {pk: k for pk, k in limits.items() if k > 0}
    if not limits:
        return
    rows: dict[object, list[fairness.ReadyCandidate]] = {pk: [] for pk in limits}
    if database_is_postgresql():
        table = connection.ops.quote_name(ReadyAgenda._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                _LATERAL_SQL.format(table=table),
                [list(limits), list(limits.values()), insight_id],
            )
            for customer_id, agenda_id, priority, added_at in cursor.fetchall():
                rows[customer_id].append(_candidate(agenda_id, customer_id, priority, added_at))
    else:
        for customer_id, k in limits.items():
            for agenda_id, priority, added_at in (
                ReadyAgenda.objects.filter(insight_id=insight_id, customer_id=customer_id)
                .order_by("-priority", "added_at")
                .values_list("agenda_id", "priority", "added_at")[:k]
            ):
                rows[customer_id].append(_candidate(agenda_id, customer_id, priority, added_at))
    candidates.by_customer.update(rows)


def _candidate(
    agenda_id: object, customer_id: object, priority: int, added_at: datetime
) -> fairness.ReadyCandidate:
    return fairness.ReadyCandidate(
        agenda_id=agenda_id, customer_id=customer_id, priority=priority, added_at=added_at
    )


def _pick(
    insight: Insight,
    info: InsightScheduleInfo,
    candidates: _Candidates,
    room: int,
    weights: dict[str, int],
) -> tuple[list[fairness.ReadyCandidate], dict]:
    return fairness.pick(
        insight.scheduling_algorithm,
        candidates.by_customer,
        room,
        state={"pending_customer_ids": info.pending_customer_ids, "deficits": info.deficits},
        weights=weights,
    )


def _count_by_customer(picks: list[fairness.ReadyCandidate]) -> dict[object, int]:
    counts: dict[object, int] = {}
    for pick in picks:
        counts[pick.customer_id] = counts.get(pick.customer_id, 0) + 1
    return counts
