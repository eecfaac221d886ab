"""Scoped reads of the pages of the scheduler: pools with their insights' queues and the
workers seen on them."""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Max, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from agendas.models import Execution
from resourcepools.models import Insight, ResourcePool
from resourcepools.selectors import (
    Principal,
    insight_list,
    resource_pool_list,
)
from scheduling.api.selectors import InsightQueue, queue_stats

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
    """Per insight, the workers with an open execution or one started in the last 24 hours."""
    since = (now or timezone.now()) - WORKERS_SEEN_WINDOW
    seen: dict[object, list[WorkerSeen]] = {}
    for row in (
        Execution.objects.filter(insight_id__in=insight_ids)
        .filter(Q(started_at__gte=since) | Q(outcome__isnull=True))
        .values("insight_id", "worker")
        .annotate(
            last_seen_at=Max(Coalesce("last_report_at", "started_at")),
            executing=Count("pk", filter=Q(outcome__isnull=True)),
            executions=Count("pk"),
        )
        .order_by("-last_seen_at")
    ):
        seen.setdefault(row["insight_id"], []).append(
            WorkerSeen(
                name=row["worker"] or "(unnamed)",
                last_seen_at=row["last_seen_at"],
                executing=row["executing"],
                executions=row["executions"],
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
