"""Aggregate reads for the operator pages (the README's Web pages), scoped through the selectors of
docs/design.md §10.3.

Every function takes the principal first and builds on the scoped selectors of the apps;
numbers come from a bounded number of aggregate queries, never from loading rows in Python."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min
from django.db.models.functions import TruncMinute
from django.utils import timezone

from agendas.models import AgendaProgress
from resourcepools.models import Insight
from resourcepools.selectors import Principal, insight_list
from scheduling.models import Alert, QueuedAgenda
from scheduling.selectors import InsightQueue, alert_list, queue_stats

State = AgendaProgress.State


OUTCOMES = (State.SUCCEEDED, State.FAILED)


THROUGHPUT_MINUTES = 60


OPEN_ALERTS_SHOWN = 20


@dataclass(frozen=True)
class InsightOverview:
    """One insight's live depths and last-hour outcomes (every customer's work on it)."""

    insight: Insight
    queued: int
    ready: int
    executing: int
    succeeded_last_hour: int
    failed_last_hour: int
    oldest_waiting_seconds: float | None


@dataclass(frozen=True)
class CustomerShare:
    """Executing agendas of one customer; `label` is empty for customers the principal
    may not name (they are summed into one "other customers" share)."""

    label: str
    executing: int


@dataclass(frozen=True)
class Overview:
    insights: list[InsightOverview]
    shares: list[CustomerShare]
    throughput: list[int]  # agendas finished per minute, oldest minute first
    open_alerts: list[Alert]
    now: datetime

    @property
    def executing_total(self) -> int:
        return sum(share.executing for share in self.shares)


def overview_get(*, principal: Principal, now: datetime | None = None) -> Overview:
    """Depths, last-hour outcomes, executing shares, throughput and open alerts."""
    now = now or timezone.now()
    insights = list(insight_list(principal=principal).order_by("resource_pool__name", "order"))
    ids = [insight.pk for insight in insights]
    stats: list[InsightQueue] = queue_stats(principal=principal, insights=insights)

    oldest_queued = dict(
        QueuedAgenda.objects.filter(insight_id__in=ids)
        .values("insight_id")
        .annotate(oldest=Min("queued_at"))
        .values_list("insight_id", "oldest")
        .order_by()
    )
    outcome_counts: dict[tuple[object, str], int] = {}
    per_minute: dict[datetime, int] = {}
    hour_ago = now - timedelta(minutes=THROUGHPUT_MINUTES)
    for row in (
        AgendaProgress.objects.filter(
            state__in=OUTCOMES, completed_at__gte=hour_ago, agenda__insight_id__in=ids
        )
        .values("agenda__insight_id", "state", minute=TruncMinute("completed_at"))
        .annotate(n=Count("pk"))
        .order_by()
    ):
        key = (row["agenda__insight_id"], row["state"])
        outcome_counts[key] = outcome_counts.get(key, 0) + row["n"]
        per_minute[row["minute"]] = per_minute.get(row["minute"], 0) + row["n"]

    rows = []
    for stat in stats:
        waiting_since = [
            moment
            for moment in (
                now - timedelta(seconds=stat.oldest_ready_age_seconds)
                if stat.oldest_ready_age_seconds is not None
                else None,
                oldest_queued.get(stat.insight.pk),
            )
            if moment is not None
        ]
        rows.append(
            InsightOverview(
                insight=stat.insight,
                queued=stat.queued,
                ready=stat.ready,
                executing=stat.executing,
                succeeded_last_hour=outcome_counts.get((stat.insight.pk, State.SUCCEEDED), 0),
                failed_last_hour=outcome_counts.get((stat.insight.pk, State.FAILED), 0),
                oldest_waiting_seconds=(
                    max(0.0, (now - min(waiting_since)).total_seconds()) if waiting_since else None
                ),
            )
        )
    return Overview(
        insights=rows,
        shares=_executing_shares(stats),
        throughput=_minute_buckets(per_minute, now),
        open_alerts=list(
            alert_list(principal=principal).filter(state=Alert.State.OPEN)[:OPEN_ALERTS_SHOWN]
        ),
        now=now,
    )


def _executing_shares(stats: list[InsightQueue]) -> list[CustomerShare]:
    named: dict[str, int] = {}
    total = 0
    for stat in stats:
        total += stat.executing
        for customer in stat.customers:
            if customer.executing:
                named[customer.customer_slug] = (
                    named.get(customer.customer_slug, 0) + customer.executing
                )
    shares = [
        CustomerShare(label=label, executing=count)
        for label, count in sorted(named.items(), key=lambda item: (-item[1], item[0]))
    ]
    hidden = total - sum(named.values())
    if hidden > 0:
        shares.append(CustomerShare(label="", executing=hidden))
    return shares


def _minute_buckets(per_minute: dict[datetime, int], now: datetime) -> list[int]:
    current = now.replace(second=0, microsecond=0)
    first = current - timedelta(minutes=THROUGHPUT_MINUTES - 1)
    buckets = [0] * THROUGHPUT_MINUTES
    for minute, count in per_minute.items():
        index = int((minute - first).total_seconds() // 60)
        if 0 <= index < THROUGHPUT_MINUTES:
            buckets[index] += count
        elif index < 0:
            # The first partial minute of the hour window falls into the oldest bucket.
            buckets[0] += count
    return buckets
