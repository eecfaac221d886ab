"""Customer-scoped reads of the scheduler's data for the API and the pages: schedules, callback
deliveries, alerts, queue depths, and pools with their insights' queues and the workers seen on
them (docs/design.md §10, §10.3)."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Max, Min, Q, QuerySet
from django.db.models.functions import Coalesce
from django.utils import timezone

from agendas.models import Execution
from agendas.queue_models import StartBucket
from resourcepools.models import Customer, Insight, Membership, ResourcePool
from resourcepools.selectors import (
    Principal,
    customer_ids_with_role,
    insight_list,
    membership_roles,
    principal_is_staff,
    resource_pool_list,
)
from scheduling.models import Alert, CallbackDelivery, QueuedAgenda, ReadyAgenda, Schedule


def _scoped(rows: QuerySet, principal: Principal) -> QuerySet:
    if principal_is_staff(principal):
        return rows
    return rows.filter(customer_id__in=customer_ids_with_role(principal, Membership.Role.VIEWER))


def schedule_list(*, principal: Principal) -> QuerySet[Schedule]:
    """Schedules of the principal's customers, with customer and template loaded."""
    return _scoped(Schedule.objects.select_related("customer", "template"), principal)


def callback_delivery_list(*, principal: Principal) -> QuerySet[CallbackDelivery]:
    """Callback outbox rows of the principal's customers."""
    return _scoped(CallbackDelivery.objects.all(), principal)


def alert_list(*, principal: Principal) -> QuerySet[Alert]:
    """Alerts of the principal's customers, with their rule loaded."""
    return _scoped(Alert.objects.select_related("rule"), principal)


@dataclass
class CustomerQueue:
    customer_id: object
    customer_slug: str
    ready: int = 0
    queued: int = 0
    executing: int = 0
    oldest_ready_at: datetime | None = None


@dataclass
class InsightQueue:
    insight: Insight
    ready: int = 0
    queued: int = 0
    executing: int = 0
    oldest_ready_age_seconds: float | None = None
    rate_tokens: float | None = None  # the insight's rate-limit tokens now; None: no limit
    customers: list[CustomerQueue] = field(default_factory=list)


def queue_stats(*, principal: Principal, insights: list[Insight]) -> list[InsightQueue]:
    """Queue depths of the given (visible) insights: one aggregate query per queue table.

    Totals count every customer's work on the insight; the per-customer breakdown names only
    the principal's own customers, except for staff and members of the pool's owner.
    """
    ids = [insight.pk for insight in insights]
    by_key: dict[tuple, CustomerQueue] = {}

    def entry(insight_id: object, customer_id: object) -> CustomerQueue:
        return by_key.setdefault(
            (insight_id, customer_id), CustomerQueue(customer_id=customer_id, customer_slug="")
        )

    for row in (
        ReadyAgenda.objects.filter(insight_id__in=ids)
        .values("insight_id", "customer_id")
        .annotate(n=Count("pk"), oldest=Min("added_at"))
        .order_by()
    ):
        item = entry(row["insight_id"], row["customer_id"])
        item.ready, item.oldest_ready_at = row["n"], row["oldest"]
    for row in (
        QueuedAgenda.objects.filter(insight_id__in=ids)
        .values("insight_id", "customer_id")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        entry(row["insight_id"], row["customer_id"]).queued = row["n"]
    for row in (
        Execution.objects.filter(insight_id__in=ids, outcome__isnull=True)
        .values("insight_id", "customer_id")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        entry(row["insight_id"], row["customer_id"]).executing = row["n"]

    slugs = dict(
        Customer.objects.filter(pk__in={key[1] for key in by_key}).values_list("pk", "slug")
    )
    staff = principal_is_staff(principal)
    own = set() if staff else set(membership_roles(principal))
    now = timezone.now()
    stats = {insight.pk: InsightQueue(insight=insight) for insight in insights}
    limited = {insight.pk: insight for insight in insights if insight.rate_limit is not None}
    for bucket in StartBucket.objects.filter(insight_id__in=list(limited)):
        insight = limited[bucket.insight_id]
        stats[insight.pk].rate_tokens = round(
            bucket.level(now, limit=insight.rate_limit, period_seconds=insight.rate_period_seconds),
            2,
        )
    for insight in limited.values():
        if stats[insight.pk].rate_tokens is None:
            stats[insight.pk].rate_tokens = float(insight.rate_limit)
    for (insight_id, customer_id), item in sorted(
        by_key.items(), key=lambda pair: slugs.get(pair[0][1], "")
    ):
        total = stats[insight_id]
        total.ready += item.ready
        total.queued += item.queued
        total.executing += item.executing
        if item.oldest_ready_at is not None:
            age = (now - item.oldest_ready_at).total_seconds()
            total.oldest_ready_age_seconds = max(total.oldest_ready_age_seconds or 0.0, age)
        if staff or customer_id in own or total.insight.resource_pool.owner_id in own:
            item.customer_slug = slugs.get(customer_id, "")
            total.customers.append(item)
    return [stats[insight.pk] for insight in insights]


WORKERS_SEEN_WINDOW = timedelta(hours=24)


@dataclass(frozen=True)
class WorkerSeen:
    """A puller name seen on an insight: when it last reported and what it holds now."""

    name: str
    last_seen_at: datetime
    executing: int
    executions: int


@dataclass
class InsightDetail:
    insight: Insight
    queue: InsightQueue
    workers: list[WorkerSeen] = field(default_factory=list)


@dataclass
class PoolDetail:
    pool: ResourcePool
    insights: list[InsightDetail] = field(default_factory=list)


def workers_seen(
    *, insight_ids: list[object], now: datetime | None = None
) -> dict[object, list[WorkerSeen]]:
    """Per insight, the workers with an open execution or one started in the last 24 hours.

    Two grouped reads, each by an index — the last day's starts (`execution_insight_started`)
    and the older executions still open (`execution_open_insight`) — never the insight's whole
    history (an `OR` of the two conditions read every execution of the insight)."""
    since = (now or timezone.now()) - WORKERS_SEEN_WINDOW
    grouped = ("insight_id", "worker")
    totals: dict[tuple, dict] = {}
    recent = (
        Execution.objects.filter(insight_id__in=insight_ids, started_at__gte=since)
        .values(*grouped)
        .annotate(
            last_seen_at=Max(Coalesce("last_report_at", "started_at")),
            executing=Count("pk", filter=Q(outcome__isnull=True)),
            executions=Count("pk"),
        )
        .order_by()
    )
    still_open = (
        Execution.objects.filter(
            insight_id__in=insight_ids, outcome__isnull=True, started_at__lt=since
        )
        .values(*grouped)
        .annotate(
            last_seen_at=Max(Coalesce("last_report_at", "started_at")),
            executing=Count("pk"),
            executions=Count("pk"),
        )
        .order_by()
    )
    for row in [*recent, *still_open]:
        key = (row["insight_id"], row["worker"])
        total = totals.setdefault(key, {"last_seen_at": row["last_seen_at"], "n": 0, "open": 0})
        total["last_seen_at"] = max(total["last_seen_at"], row["last_seen_at"])
        total["n"] += row["executions"]
        total["open"] += row["executing"]
    seen: dict[object, list[WorkerSeen]] = {}
    for (insight_id, worker), total in sorted(
        totals.items(), key=lambda item: item[1]["last_seen_at"], reverse=True
    ):
        seen.setdefault(insight_id, []).append(
            WorkerSeen(
                name=worker or "(unnamed)",
                last_seen_at=total["last_seen_at"],
                executing=total["open"],
                executions=total["n"],
            )
        )
    return seen


def pools_overview(*, principal: Principal, now: datetime | None = None) -> list[PoolDetail]:
    """Visible pools with their visible insights, live queue depths and workers seen."""
    insights = list(
        insight_list(principal=principal).order_by("resource_pool__name", "order", "created_at")
    )
    pools = {pool.pk: PoolDetail(pool=pool) for pool in resource_pool_list(principal=principal)}
    stats = queue_stats(principal=principal, insights=insights)
    workers = workers_seen(insight_ids=[insight.pk for insight in insights], now=now)
    for insight, queue in zip(insights, stats, strict=True):
        detail = pools.setdefault(insight.resource_pool_id, PoolDetail(pool=insight.resource_pool))
        detail.insights.append(
            InsightDetail(insight=insight, queue=queue, workers=workers.get(insight.pk, []))
        )
    return sorted(pools.values(), key=lambda detail: detail.pool.name)
