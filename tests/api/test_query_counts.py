"""List endpoints cost a fixed number of queries, however many rows they show."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas.services import agenda_abort
from resourcepools.models import Membership
from scheduling.models import Alert, AlertRule
from tests.factories import (
    AgendaTemplateFactory,
    CustomerFactory,
    InsightFactory,
    MembershipFactory,
    ResourcePoolFactory,
)

pytestmark = pytest.mark.django_db
Role = Membership.Role


@pytest.fixture
def world(staff_client, customer, submitter, agenda_in_state, insight, pool, template):
    """Grows every kind of row a list endpoint shows, one more of each per call."""
    customer.callback_url = "https://hooks.example.com/pop"
    customer.save(update_fields=["callback_url"])
    counter = iter(range(1000))

    def grow():
        n = next(counter)
        other = CustomerFactory(resource_pool=pool)
        MembershipFactory(customer=customer, role=Role.VIEWER)
        ResourcePoolFactory(owner=other)
        shared = InsightFactory(resource_pool=pool)
        shared.allowed_customers.add(customer, other)
        extra = AgendaTemplateFactory(customer=customer)
        extra.allowed_customers.add(other)
        agenda = agenda_in_state(submitter, "executing", link_id="grow")
        agenda_abort(principal=submitter.user, agenda=agenda_in_state(submitter, "ready"))
        staff_client.post(
            "/api/v1/schedules/",
            {
                "customer": "acme",
                "name": f"s{n}",
                "template": str(template.pk),
                "payload": {"url": "u"},
                "cron": "* * * * *",
            },
            format="json",
        )
        rule = AlertRule.objects.create(
            customer=customer, name=f"r{n}", kind="reclaims", threshold=1
        )
        Alert.objects.create(rule=rule, customer=customer, value=2, opened_at=timezone.now())
        return agenda

    return grow


LISTS = [
    "/api/v1/customers/",
    "/api/v1/customers/{customer}/members/",
    "/api/v1/resource-pools/",
    "/api/v1/insights/",
    "/api/v1/agenda-templates/",
    "/api/v1/agendas/",
    "/api/v1/agenda-progress/",
    "/api/v1/operation-progress/",
    "/api/v1/schedules/",
    "/api/v1/callback-deliveries/",
    "/api/v1/queues/",
    "/api/v1/alerts/",
    "/api/v1/progress-summary/?link_id=grow",
]


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("caller", ["staff", "admin"])
def test_list_queries_do_not_grow_with_rows(
    world, customer, staff_client, admin_client, django_assert_max_num_queries, path, caller
):
    client = staff_client if caller == "staff" else admin_client
    url = path.format(customer=customer.pk)
    world()
    with CaptureQueriesContext(connection) as small:
        assert client.get(url).status_code == 200
    baseline = len(small)  # read now: every request resets the connection's query log
    for _ in range(2):
        world()

    with django_assert_max_num_queries(baseline):
        response = client.get(url)

    assert response.status_code == 200
    assert response.json().get("count", 1) >= 1


def test_executions_and_runs_queries_do_not_grow(
    world, client, django_assert_max_num_queries, template
):
    agenda = world()
    schedule_id = client.get("/api/v1/schedules/").json()["results"][0]["id"]
    client.post(f"/api/v1/schedules/{schedule_id}/trigger/")
    with CaptureQueriesContext(connection) as small:
        client.get(f"/api/v1/agendas/{agenda.pk}/executions/")
        client.get(f"/api/v1/schedules/{schedule_id}/runs/")
    baseline = len(small)
    for _ in range(3):
        client.post(f"/api/v1/schedules/{schedule_id}/trigger/")

    with django_assert_max_num_queries(baseline):
        client.get(f"/api/v1/agendas/{agenda.pk}/executions/")
        runs = client.get(f"/api/v1/schedules/{schedule_id}/runs/")

    assert runs.json()["count"] == 4


def test_bulk_submit_reads_the_created_agendas_back_in_constant_queries(
    client, operations, django_assert_max_num_queries
):
    def submit(n):
        return client.post(
            "/api/v1/agendas/bulk/", {"agendas": [{"operations": operations}] * n}, format="json"
        )

    with CaptureQueriesContext(connection) as one:
        submit(1)
    for_one = len(one)
    with CaptureQueriesContext(connection) as ten:
        submit(10)

    per_item = (len(ten) - for_one) / 9
    # Each item is written on its own (savepoint + rows); reading back does not add per item.
    assert per_item <= 12
