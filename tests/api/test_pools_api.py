"""resource-pools/, insights/ and queues/ (docs/design.md §10, §10.3)."""

import pytest

from resourcepools.models import Insight, Membership, ResourcePool
from tests.factories import CustomerFactory, InsightFactory, ResourcePoolFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


@pytest.fixture
def farm_admin(pool_owner, make_principal):
    return make_principal(pool_owner, Role.ADMIN)


@pytest.fixture
def farm_client(farm_admin, api_client_for):
    return api_client_for(farm_admin)


@pytest.fixture
def foreign_pool(db):
    return ResourcePoolFactory(name="elsewhere", owner=CustomerFactory(slug="elsewhere-co"))


# --- resource pools ------------------------------------------------------------------------


def test_customers_see_the_pool_they_use_but_not_others(client, pool, foreign_pool):
    response = client.get("/api/v1/resource-pools/")

    assert response.status_code == 200
    assert [row["name"] for row in response.json()["results"]] == ["farm"]
    assert response.json()["results"][0]["owner_slug"] == "farmco"
    assert client.get(f"/api/v1/resource-pools/{foreign_pool.pk}/").status_code == 404


def test_staff_create_a_pool_for_a_customer(staff_client, customer):
    response = staff_client.post(
        "/api/v1/resource-pools/", {"owner": "acme", "name": "acme-farm"}, format="json"
    )

    assert response.status_code == 201
    assert ResourcePool.objects.get(name="acme-farm").owner == customer


def test_a_customer_admin_may_not_create_a_pool_even_one_it_would_own(admin_client, customer):
    response = admin_client.post(
        "/api/v1/resource-pools/", {"owner": "acme", "name": "acme-farm"}, format="json"
    )

    assert response.status_code == 403
    assert not ResourcePool.objects.filter(name="acme-farm").exists()


def test_a_submitter_may_not_create_a_pool(client, customer):
    response = client.post(
        "/api/v1/resource-pools/", {"owner": "acme", "name": "acme-farm"}, format="json"
    )

    assert response.status_code == 403
    assert not ResourcePool.objects.filter(name="acme-farm").exists()


def test_a_pool_for_an_invisible_owner_or_a_taken_name_is_400(
    admin_client, staff_client, pool, other_customer
):
    foreign = admin_client.post(
        "/api/v1/resource-pools/", {"owner": str(other_customer.pk), "name": "x"}, format="json"
    )
    taken = staff_client.post(
        "/api/v1/resource-pools/", {"owner": "acme", "name": "farm"}, format="json"
    )

    assert (foreign.status_code, list(foreign.json())) == (400, ["owner"])
    assert (taken.status_code, list(taken.json())) == (400, ["name"])
    assert ResourcePool.objects.count() == 1


def test_only_the_owners_admin_changes_or_deletes_a_pool(admin_client, farm_client, pool):
    url = f"/api/v1/resource-pools/{pool.pk}/"

    refused = admin_client.patch(url, {"description": "mine now"}, format="json")
    changed = farm_client.patch(url, {"description": "GPU farm"}, format="json")

    assert refused.status_code == 403
    assert changed.status_code == 200
    pool.refresh_from_db()
    assert pool.description == "GPU farm"
    assert admin_client.delete(url).status_code == 403
    assert farm_client.delete(url).status_code == 204
    assert not ResourcePool.objects.filter(pk=pool.pk).exists()


def test_changing_a_foreign_pool_is_404(farm_client, foreign_pool):
    response = farm_client.patch(
        f"/api/v1/resource-pools/{foreign_pool.pk}/", {"description": "x"}, format="json"
    )

    assert response.status_code == 404
    foreign_pool.refresh_from_db()
    assert foreign_pool.description == ""


# --- insights ------------------------------------------------------------------------------


def test_customers_read_the_insights_of_their_pool(client, insight, foreign_pool):
    hidden = InsightFactory(resource_pool=foreign_pool, name="hidden", is_global=False)

    response = client.get("/api/v1/insights/", {"resource_pool": str(insight.resource_pool_id)})

    assert [row["name"] for row in response.json()["results"]] == ["mediainfo"]
    assert response.json()["results"][0]["allowed_customer_ids"] is None
    assert client.get(f"/api/v1/insights/{hidden.pk}/").status_code == 404


def test_the_pool_owners_admin_creates_an_insight_shared_with_a_customer(
    farm_client, pool, customer
):
    response = farm_client.post(
        "/api/v1/insights/",
        {
            "resource_pool": "farm",
            "name": "gpu",
            "queue_size": 4,
            "scheduling_algorithm": "weighted_fair",
            "mappers": {"operation_type": ["transcode"]},
            "is_global": False,
            "allowed_customers": [str(customer.pk)],
        },
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["allowed_customer_ids"] == [str(customer.pk)]
    insight = Insight.objects.get(name="gpu")
    assert (insight.queue_size, insight.scheduling_algorithm) == (4, "weighted_fair")
    assert list(insight.allowed_customers.all()) == [customer]


def test_bad_insight_settings_are_400_by_field(farm_client, pool):
    response = farm_client.post(
        "/api/v1/insights/",
        {
            "resource_pool": "farm",
            "name": "bad",
            "queue_size": 0,
            "mappers": {"colour": ["red"]},
            "allowed_customers": ["00000000-0000-0000-0000-000000000000"],
        },
        format="json",
    )

    assert response.status_code == 400
    assert set(response.json()) == {"queue_size", "mappers", "allowed_customers.0"}
    assert not Insight.objects.filter(name="bad").exists()


def test_a_customer_admin_may_not_change_the_farms_insights(admin_client, insight):
    response = admin_client.patch(f"/api/v1/insights/{insight.pk}/", {"queue_size": 99})

    assert response.status_code == 403
    insight.refresh_from_db()
    assert insight.queue_size == 10


def test_the_pool_owners_admin_changes_an_insight(farm_client, insight):
    response = farm_client.patch(
        f"/api/v1/insights/{insight.pk}/", {"queue_size": 25}, format="json"
    )

    assert (response.status_code, response.json()["queue_size"]) == (200, 25)


def test_changing_a_foreign_insight_is_404(farm_client, foreign_pool):
    hidden = InsightFactory(
        resource_pool=foreign_pool, name="hidden", queue_size=3, is_global=False
    )

    response = farm_client.patch(f"/api/v1/insights/{hidden.pk}/", {"queue_size": 1})

    assert response.status_code == 404
    hidden.refresh_from_db()
    assert hidden.queue_size == 3


def test_deleting_an_insight_that_agendas_use_is_409(
    farm_client, submitter, submit_agenda, insight
):
    submit_agenda(submitter)

    response = farm_client.delete(f"/api/v1/insights/{insight.pk}/")

    assert response.status_code == 409
    assert Insight.objects.filter(pk=insight.pk).exists()


# --- queues --------------------------------------------------------------------------------


def test_queues_count_ready_queued_and_executing_work(
    client, farm_client, submitter, other_submitter, agenda_in_state, insight
):
    agenda_in_state(submitter, "executing")
    agenda_in_state(other_submitter, "queued")
    agenda_in_state(submitter, "ready")
    agenda_in_state(other_submitter, "ready")

    (mine,) = client.get("/api/v1/queues/").json()["results"]
    (farms,) = farm_client.get("/api/v1/queues/").json()["results"]

    totals = {key: mine[key] for key in ("insight", "queue_size", "ready", "queued", "executing")}
    assert totals == {
        "insight": str(insight.pk),
        "queue_size": 10,
        "ready": 2,
        "queued": 1,
        "executing": 1,
    }
    assert mine["oldest_ready_age_seconds"] >= 0
    assert [
        (c["customer_slug"], c["ready"], c["queued"], c["executing"]) for c in mine["customers"]
    ] == [("acme", 1, 0, 1)]
    assert [c["customer_slug"] for c in farms["customers"]] == ["acme", "globex"]


def test_a_foreign_insights_queue_is_404(client, foreign_pool):
    hidden = InsightFactory(resource_pool=foreign_pool, name="hidden", is_global=False)

    assert client.get(f"/api/v1/queues/{hidden.pk}/").status_code == 404


def test_an_empty_queue_has_no_oldest_age(client, insight):
    response = client.get(f"/api/v1/queues/{insight.pk}/")

    assert response.status_code == 200
    assert (response.json()["ready"], response.json()["oldest_ready_age_seconds"]) == (0, None)
