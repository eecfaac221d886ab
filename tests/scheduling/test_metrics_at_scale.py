"""/metrics over many customers (issue 18): by default the series do not multiply with the
customers; POP_METRICS_PER_CUSTOMER=true names each customer with work."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agendas.models import Execution
from agendas.services import agenda_submit
from core.principals import SYSTEM
from scheduling.models import QueuedAgenda, ReadyAgenda
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db

FEW, MANY = 30, 300
LEVELS = ("pop_ready_agendas", "pop_queued_agendas", "pop_executing_agendas")


@pytest.fixture
def scrape(client, settings):
    """The series of one GET /metrics: {(name, labels): value}."""
    settings.POP_METRICS_TOKEN = "scrape-token"
    settings.POP_FILL_NUDGE = "off"

    def run() -> dict[tuple, float]:
        response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token")
        assert response.status_code == 200
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(response.content.decode())
            for sample in family.samples
        }

    return run


@pytest.fixture
def give_work(pool, insight, operations, fill, pull):
    """`count` more customers, each with one agenda; then a fill and a pull of five, so that
    some customers are ready, some queued and some executing."""
    insight.queue_size = 20
    insight.save(update_fields=["queue_size"])

    def run(count: int) -> None:
        for customer in CustomerFactory.create_batch(count, resource_pool=pool):
            agenda_submit(principal=SYSTEM, customer=customer, operations=operations)
        fill(insight)
        pull(insight, count=5)

    return run


def _with_customer(samples: dict) -> list[tuple]:
    return [key for key in samples if any(label == "customer" for label, _ in key[1])]


def test_the_default_series_count_does_not_grow_with_the_customers(scrape, give_work, insight):
    give_work(FEW)
    few = scrape()
    give_work(MANY - FEW)
    many = scrape()

    assert ReadyAgenda.objects.values("customer").distinct().count() > MANY - 50
    assert len(many) == len(few)
    assert set(many) == set(few)
    assert _with_customer(many) == []
    per_insight = (("insight", insight.name),)
    assert many[("pop_ready_agendas", per_insight)] == ReadyAgenda.objects.count()
    assert many[("pop_queued_agendas", per_insight)] == QueuedAgenda.objects.count() > 0
    assert many[("pop_executing_agendas", per_insight)] == 10  # five per pull


def test_per_customer_series_are_an_opt_in_naming_each_customer_with_work(
    scrape, give_work, settings
):
    give_work(MANY)
    settings.POP_METRICS_PER_CUSTOMER = True

    samples = scrape()

    for name, rows in zip(
        LEVELS,
        (ReadyAgenda.objects, QueuedAgenda.objects, Execution.objects.filter(outcome=None)),
        strict=True,
    ):
        customers = {
            dict(labels)["customer"] for series, labels in _with_customer(samples) if series == name
        }
        expected = set(rows.values_list("customer__slug", flat=True).distinct())
        assert customers == expected, name
    assert len(_with_customer(samples)) == MANY  # every customer's agenda is in one level


def test_the_callback_gauge_counts_the_backlog_and_the_given_up_never_the_delivered_history(
    scrape, submitter, submit_agenda
):
    from django.utils import timezone

    from scheduling.models import CallbackDelivery

    agenda = submit_agenda(submitter)
    Status = CallbackDelivery.Status
    for status in [Status.DELIVERED] * 5 + [Status.FAILED] + [Status.PENDING] * 2:
        CallbackDelivery.objects.create(
            agenda=agenda,
            customer=agenda.customer,
            url="https://hooks.example.com/pop",
            event="succeeded",
            body={},
            next_attempt_at=timezone.now(),
            status=status,
        )

    samples = scrape()

    gauge = {
        dict(labels)["status"]: value
        for (name, labels), value in samples.items()
        if name == "pop_callback_deliveries"
    }
    assert gauge == {"pending": 2, "failed": 1}
