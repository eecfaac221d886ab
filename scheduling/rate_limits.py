"""Rate limits in the fill (docs/design.md §6.1): "at most N agendas started per period", per
customer over all insights and per insight, as token buckets (`agendas.queue_models.StartBucket`)
drawn from in the fill's transaction.

An insight's bucket is locked with the insight's fill (one filler at a time already) and bounds
the room. A customer's bucket is read unlocked to bound what the picker offers it, then locked
(row locks in customer-id order, after the cap locks) and read again to cut the picks: fills of
several insights drawing on one customer's bucket take turns, so none is overdrawn.
"""

from datetime import datetime

from agendas.queue_models import StartBucket
from resourcepools.models import Insight
from scheduling.fairness import ReadyCandidate, within_allowance

# A customer's or an insight's limit: (agendas per period, period in seconds).
Limit = tuple[int, int]


def _ensure(buckets: list[StartBucket]) -> None:
    """Insert the buckets that do not exist yet (full), so that every filler then locks the same
    row instead of two racing to create it."""
    StartBucket.objects.bulk_create(buckets, ignore_conflicts=True)


def insight_tokens(insight: Insight, *, now: datetime) -> tuple[StartBucket | None, int]:
    """Lock the insight's bucket; return it and the whole tokens it holds (None and a huge
    number when the insight has no limit)."""
    if insight.rate_limit is None:
        return None, 1 << 30
    limit, period = insight.rate_limit, insight.rate_period_seconds
    _ensure([StartBucket(insight_id=insight.pk, tokens=float(limit), refilled_at=now)])
    bucket = StartBucket.objects.select_for_update().get(insight_id=insight.pk)
    return bucket, int(bucket.level(now, limit=limit, period_seconds=period))


def insight_take(
    insight: Insight, bucket: StartBucket | None, count: int, *, now: datetime
) -> None:
    if bucket is None or count <= 0:
        return
    bucket.take(count, now, limit=insight.rate_limit, period_seconds=insight.rate_period_seconds)
    bucket.save()


def customer_tokens(limits: dict[object, Limit], *, now: datetime) -> dict[object, int]:
    """Whole tokens of each limited customer, read without a lock (the picker's bound)."""
    if not limits:
        return {}  # most fills: no customer among the lanes read is limited
    buckets = {
        bucket.customer_id: bucket
        for bucket in StartBucket.objects.filter(customer_id__in=list(limits))
    }
    return {
        pk: int(
            buckets[pk].level(now, limit=limit, period_seconds=period) if pk in buckets else limit
        )
        for pk, (limit, period) in limits.items()
    }


def within_customer_limits(
    picks: list[ReadyCandidate], limits: dict[object, Limit], *, now: datetime
) -> tuple[list[ReadyCandidate], dict[object, StartBucket]]:
    """Lock the buckets of the limited customers among the picks and cut each customer's picks
    to its whole tokens; return the picks kept and the locked buckets (take from them once the
    move is known)."""
    limited = sorted({pick.customer_id for pick in picks if pick.customer_id in limits}, key=str)
    if not limited:
        return picks, {}
    _ensure(
        [
            StartBucket(customer_id=pk, tokens=float(limits[pk][0]), refilled_at=now)
            for pk in limited
        ]
    )
    buckets = {
        bucket.customer_id: bucket
        for bucket in StartBucket.objects.select_for_update()
        .filter(customer_id__in=limited)
        .order_by("customer_id")
    }
    allowance = {
        pk: int(buckets[pk].level(now, limit=limits[pk][0], period_seconds=limits[pk][1]))
        for pk in limited
    }
    return within_allowance(picks, allowance), buckets


def customers_take(
    buckets: dict[object, StartBucket],
    limits: dict[object, Limit],
    moved: dict[object, int],
    *,
    now: datetime,
) -> None:
    """Take a token per agenda moved from each limited customer's locked bucket."""
    for pk, bucket in buckets.items():
        if moved.get(pk):
            limit, period = limits[pk]
            bucket.take(moved[pk], now, limit=limit, period_seconds=period)
            bucket.save()
