"""GET /metrics, /healthz, /readyz (docs/design.md §8)."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from django_q.models import Task
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from scheduling import timed
from scheduling.recurring import TICKER_FUNC

pytestmark = pytest.mark.django_db


def _samples(text: str) -> dict[tuple, float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def scraper(client, settings):
    """A Prometheus scraper holding the metrics token."""
    settings.POP_METRICS_TOKEN = "scrape-token"
    client.defaults["HTTP_AUTHORIZATION"] = "Bearer scrape-token"
    return client


def test_metrics_report_queue_levels_per_insight_and_customer_when_asked(
    scraper, settings, submitter, submit_agenda, insight, fill, pull, report
):
    settings.POP_METRICS_PER_CUSTOMER = True
    client = scraper
    for _ in range(3):
        submit_agenda(submitter)
    insight.queue_size = 2
    insight.save()
    fill(insight)
    [pulled] = pull(insight, count=1)
    report(pulled)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    samples = _samples(response.content.decode())
    labels = (("customer", "acme"), ("insight", "mediainfo"))
    assert samples[("pop_ready_agendas", labels)] == 1
    assert samples[("pop_queued_agendas", labels)] == 1
    assert samples[("pop_executing_agendas", labels)] == 1
    assert samples[("pop_queue_size", (("insight", "mediainfo"),))] == 2
    assert samples[("pop_insight_paused", (("insight", "mediainfo"),))] == 0
    assert samples[("pop_oldest_ready_age_seconds", (("insight", "mediainfo"),))] >= 0
    assert samples[("pop_pulled_agendas_total", (("insight", "mediainfo"),))] >= 1
    assert ("pop_reports_total", (("result", "progress"),)) in samples
    names = {name for name, _ in samples}
    assert {"pop_pull_latency_seconds_bucket", "pop_fills_total"} <= names


def test_metrics_levels_sum_over_customers_and_name_none_by_default(
    scraper, submitter, other_submitter, submit_agenda, insight
):
    submit_agenda(submitter)
    submit_agenda(submitter)
    submit_agenda(other_submitter)

    response = scraper.get("/metrics")

    assert response.status_code == 200
    text = response.content.decode()
    samples = _samples(text)
    assert samples[("pop_ready_agendas", (("insight", "mediainfo"),))] == 3
    assert not [key for key in samples if any(label == "customer" for label, _ in key[1])]
    assert "acme" not in text and "globex" not in text


def test_metrics_can_require_a_token(client, settings):
    settings.POP_METRICS_TOKEN = "s3cret"

    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_metrics_without_a_token_are_closed_in_production(
    client, settings, submitter, submit_agenda
):
    settings.DEBUG = False
    settings.POP_METRICS_TOKEN = ""
    settings.POP_METRICS_PUBLIC = False
    submit_agenda(submitter)

    response = client.get("/metrics")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"pop_ready_agendas" not in response.content


@pytest.mark.parametrize(("debug", "public"), [(True, False), (False, True)])
def test_metrics_without_a_token_are_open_in_debug_or_when_made_public(
    client, settings, debug, public
):
    settings.DEBUG = debug
    settings.POP_METRICS_TOKEN = ""
    settings.POP_METRICS_PUBLIC = public

    response = client.get("/metrics")

    assert response.status_code == 200
    assert b"pop_queue_size" in response.content


def test_healthz_is_ok(client):
    response = client.get("/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_needs_only_the_database_and_the_scheduler_has_its_own_check(client):
    ready_without_ticker = client.get("/readyz")
    stale = client.get("/healthz/scheduler")
    now = timezone.now()
    Task.objects.create(
        id="t1",
        name="ticker",
        func=TICKER_FUNC,
        started=now - timedelta(seconds=11),
        stopped=now - timedelta(seconds=1),
        success=True,
    )
    healthy = client.get("/healthz/scheduler")

    # A web node serves whether or not a cluster runs: readiness is the database only.
    assert ready_without_ticker.status_code == 200
    assert ready_without_ticker.json() == {"status": "ok", "checks": {"database": "ok"}}
    assert (stale.status_code, stale["Retry-After"]) == (503, "5")
    assert stale.json()["checks"]["database"] == "ok"
    assert healthy.status_code == 200
    assert healthy.json() == {"status": "ok", "checks": {"database": "ok", "scheduler": "ok"}}


def test_readyz_and_the_scheduler_check_answer_503_json_when_the_database_fails(
    client, monkeypatch
):
    from django.db import OperationalError
    from django.db.models.query import QuerySet

    from scheduling import observability

    monkeypatch.setattr(observability, "_database_error", lambda: "error: OperationalError")

    def broken(self):
        raise OperationalError("the server closed the connection")

    monkeypatch.setattr(QuerySet, "exists", broken)
    ready = client.get("/readyz")
    scheduler = client.get("/healthz/scheduler")

    assert (ready.status_code, ready["Retry-After"]) == (503, "5")
    assert ready.json()["checks"] == {"database": "error: OperationalError"}
    assert scheduler.status_code == 503
    assert scheduler.json()["checks"] == {"database": "error: OperationalError"}


def test_the_scheduler_tick_age_is_a_metric(client, settings):
    settings.POP_METRICS_PUBLIC = True
    now = timezone.now()
    Task.objects.create(
        id="t2",
        name="ticker",
        func=TICKER_FUNC,
        started=now - timedelta(seconds=20),
        stopped=now - timedelta(seconds=7),
        success=True,
    )

    body = client.get("/metrics").content.decode()

    [line] = [row for row in body.splitlines() if row.startswith("pop_scheduler_last_tick_age")]
    assert 6 <= float(line.split()[-1]) < 60


def _counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_outcome_reclaim_and_time_out_counters_count_what_happened(
    submitter, submit_agenda, insight, fill, pull, report
):
    insight.max_execution_seconds = 120
    insight.lease_seconds = 60
    insight.save()
    succeeded = _counter("pop_execution_outcomes_total", outcome="succeeded")
    reclaims = _counter("pop_reclaims_total")
    timeouts = _counter("pop_timeouts_total")
    for _ in range(3):
        submit_agenda(submitter, max_attempts=2, retry_delay_seconds=0)
    with time_machine.travel(timezone.now(), tick=False) as clock:
        fill(insight)
        done, lost, slow = pull(insight, count=3)
        report(done, state="succeeded")
        clock.shift(timedelta(seconds=50))
        report(slow)  # heartbeats: only the time-out will end it
        clock.shift(timedelta(seconds=insight.lease_seconds + 1 - 50))
        assert timed.executions_reclaim() == 1  # `lost` never reported
        clock.shift(timedelta(seconds=121 - insight.lease_seconds - 1))
        report(slow)
        assert timed.executions_time_out() == 1

    assert _counter("pop_execution_outcomes_total", outcome="succeeded") == succeeded + 1
    assert _counter("pop_reclaims_total") == reclaims + 1
    assert _counter("pop_timeouts_total") == timeouts + 1
    assert lost.execution.pk != slow.execution.pk


def test_a_batch_report_counts_each_report_once_by_what_it_did(
    submitter, submit_agenda, insight, fill, pull
):
    from scheduling.report import execution_report_batch

    for _ in range(3):
        submit_agenda(submitter)
    fill(insight)
    first, second, third = pull(insight, count=3)
    before = {
        "progress": _counter("pop_reports_total", result="progress"),
        "succeeded": _counter("pop_reports_total", result="succeeded"),
        "outcome": _counter("pop_execution_outcomes_total", outcome="succeeded"),
    }

    results = execution_report_batch(
        reports=[
            {"execution": item.execution.pk, "lease_token": str(item.execution.lease_token)} | extra
            for item, extra in (
                (first, {"state": "succeeded"}),
                (second, {}),
                (third, {"state": "succeeded"}),
            )
        ]
    )

    assert [result.status for result in results] == [200, 200, 200]
    assert _counter("pop_reports_total", result="progress") == before["progress"] + 1
    assert _counter("pop_reports_total", result="succeeded") == before["succeeded"] + 2
    assert _counter("pop_execution_outcomes_total", outcome="succeeded") == before["outcome"] + 2
