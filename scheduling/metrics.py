"""Prometheus series of docs/design.md §8.

Two kinds:
- Levels (ready / queued / executing per insight, per customer too with
  POP_METRICS_PER_CUSTOMER; oldest ready age, callback outbox pending and failed) are read from the
  database at scrape time by `DatabaseCollector`, so every web node reports the same truth
  whichever process did the work.
- Events (fills, pulls, pull latency, reports, outcomes, reclaims, callback outcomes) are
  counted in the process where they happen. With several processes (gunicorn workers, the
  django-q2 cluster) set `PROMETHEUS_MULTIPROC_DIR` and prometheus-client's multiprocess
  mode aggregates them; without it each process reports its own counts.
"""

import os
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone
from django_q.models import Success
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from agendas.models import Execution
from resourcepools.models import Customer, Insight
from scheduling.models import CallbackDelivery, QueuedAgenda, ReadyAgenda
from scheduling.recurring import TICKER_FUNC

FILLS = Counter("pop_fills_total", "Fill runs that moved agendas into a queue.", ["insight"])
FILLED_AGENDAS = Counter(
    "pop_filled_agendas_total", "Agendas moved from ready to queued.", ["insight"]
)
RATE_LIMITED = Counter(
    "pop_fill_rate_limited_total",
    "Fills in which a rate limit (of the insight, or of a customer with ready work) held back "
    "agendas that could otherwise have been queued.",
    ["scope"],
)
PULLS = Counter("pop_pulls_total", "Pull requests answered.", ["insight"])
PULLED_AGENDAS = Counter("pop_pulled_agendas_total", "Agendas leased to pullers.", ["insight"])
PULL_LATENCY = Histogram(
    "pop_pull_latency_seconds",
    "Time to claim work in one pull check (excluding long-poll waiting).",
    ["insight"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
REPORTS = Counter("pop_reports_total", "Execution reports by result.", ["result"])
OUTCOMES = Counter("pop_execution_outcomes_total", "Executions ended, by outcome.", ["outcome"])
RECLAIMS = Counter("pop_reclaims_total", "Executions reclaimed after their lease expired.")
TIMEOUTS = Counter("pop_timeouts_total", "Executions ended for running past the limit.")
CALLBACKS = Counter("pop_callbacks_total", "Callback delivery attempts by outcome.", ["outcome"])


class DatabaseCollector(Collector):
    """Queue levels per insight, read at scrape time (a few grouped queries).

    Per customer too only with POP_METRICS_PER_CUSTOMER=true: the `customer` label names every
    customer of the service to whoever can scrape, so by default the levels sum over customers.
    """

    def collect(self) -> Iterator[Metric]:
        per_customer = bool(getattr(settings, "POP_METRICS_PER_CUSTOMER", False))
        insight_rows = list(Insight.objects.values_list("pk", "name", "queue_size"))
        insights = {pk: name for pk, name, _ in insight_rows}
        customers = dict(Customer.objects.values_list("pk", "slug")) if per_customer else {}
        group_by = ("insight_id", "customer_id") if per_customer else ("insight_id",)

        def label(mapping: dict, key: object) -> str:
            return str(mapping.get(key, key))

        for name, help_text, rows in (
            (
                "pop_ready_agendas",
                "Agendas ready and waiting for a fill.",
                ReadyAgenda.objects.values_list(*group_by).annotate(n=Count("pk")),
            ),
            (
                "pop_queued_agendas",
                "Agendas queued in an insight, waiting for a puller.",
                QueuedAgenda.objects.values_list(*group_by).annotate(n=Count("pk")),
            ),
            (
                "pop_executing_agendas",
                "Agendas leased to a worker (open executions).",
                Execution.objects.filter(outcome__isnull=True)
                .values_list(*group_by)
                .annotate(n=Count("pk")),
            ),
        ):
            if per_customer:
                family = GaugeMetricFamily(name, help_text, labels=["insight", "customer"])
                for insight_id, customer_id, count in rows.order_by():
                    family.add_metric(
                        [label(insights, insight_id), label(customers, customer_id)], count
                    )
            else:
                family = GaugeMetricFamily(name, help_text, labels=["insight"])
                for insight_id, count in rows.order_by():
                    family.add_metric([label(insights, insight_id)], count)
            yield family

        paused = GaugeMetricFamily(
            "pop_insight_paused", "1 while an insight is paused, else 0.", labels=["insight"]
        )
        for name, is_paused in Insight.objects.values_list("name", "paused"):
            paused.add_metric([name], 1 if is_paused else 0)
        yield paused
        size = GaugeMetricFamily("pop_queue_size", "Configured queue depth.", labels=["insight"])
        for _, name, queue_size in insight_rows:
            size.add_metric([name], queue_size)
        yield size

        now = timezone.now()
        oldest = GaugeMetricFamily(
            "pop_oldest_ready_age_seconds",
            "Age of the oldest ready agenda per insight.",
            labels=["insight"],
        )
        for insight_id, added_at in (
            ReadyAgenda.objects.values_list("insight_id")
            .annotate(oldest=Min("added_at"))
            .order_by()
        ):
            oldest.add_metric([label(insights, insight_id)], (now - added_at).total_seconds())
        yield oldest

        last_tick = (
            Success.objects.filter(func=TICKER_FUNC)
            .order_by("-stopped")
            .values_list("stopped", flat=True)
            .first()
        )
        tick = GaugeMetricFamily(
            "pop_scheduler_last_tick_age_seconds",
            "Seconds since the scheduler's ticker last finished a link (absent: never).",
        )
        if last_tick is not None:
            tick.add_metric([], (now - last_tick).total_seconds())
        yield tick

        outbox = GaugeMetricFamily(
            "pop_callback_deliveries",
            "Callback outbox rows waiting to be sent (pending) or given up (failed).",
            labels=["status"],
        )
        # Each count reads its own partial index; delivered rows are history (counted as they
        # go in pop_callbacks_total) and counting them would read every one of them.
        for status in (CallbackDelivery.Status.PENDING, CallbackDelivery.Status.FAILED):
            outbox.add_metric([status], CallbackDelivery.objects.filter(status=status).count())
        yield outbox


def registry() -> CollectorRegistry:
    """The registry /metrics serves: process (or multiprocess) events plus database levels."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        scrape = CollectorRegistry()
        MultiProcessCollector(scrape)
    else:
        scrape = CollectorRegistry()
        scrape.register(_ProcessEvents())
    scrape.register(DatabaseCollector())
    return scrape


class _ProcessEvents(Collector):
    """This process's own series (everything in prometheus-client's default registry)."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()
