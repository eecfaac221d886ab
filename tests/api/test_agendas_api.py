"""agendas/: submit, idempotency, bulk, filters, detail with progress, executions (docs/design.md
§5.1; docs/design.md §10)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agendas.api.filters import AgendaFilter
from agendas.models import Agenda, AgendaProgress
from resourcepools.models import Membership
from scheduling.models import ReadyAgenda
from tests.factories import MembershipFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


def test_submitting_an_agenda_is_201_with_its_progress(client, operations, insight):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": operations, "link_id": "batch-1", "priority": 7, "external_id": "ext-9"},
        format="json",
    )

    assert response.status_code == 201
    body = response.json()
    assert (body["state"], body["processing_state"], body["insight"]) == (
        "ready",
        "waiting",
        str(insight.pk),
    )
    assert body["progress"]["state"] == "ready"
    assert [op["name"] for op in body["progress"]["operations"]] == ["probe", "report"]
    agenda = Agenda.objects.get(pk=body["id"])
    assert (agenda.link_id, agenda.priority, agenda.external_id) == ("batch-1", 7, "ext-9")
    assert ReadyAgenda.objects.filter(agenda=agenda).exists()


def test_a_repeated_idempotency_key_returns_the_first_agenda_with_200(client, operations):
    first = client.post(
        "/api/v1/agendas/", {"operations": operations}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )
    again = client.post(
        "/api/v1/agendas/", {"operations": operations}, format="json", HTTP_IDEMPOTENCY_KEY="k-1"
    )

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert Agenda.objects.count() == 1


def test_an_overlong_idempotency_key_is_400_naming_the_header(client, operations):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": operations},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k" * 300,
    )

    assert (response.status_code, list(response.json())) == (400, ["Idempotency-Key"])
    assert Agenda.objects.count() == 0


def test_a_viewer_may_not_submit(viewer_client, operations, insight):
    response = viewer_client.post("/api/v1/agendas/", {"operations": operations}, format="json")

    assert response.status_code == 403
    assert Agenda.objects.count() == 0


def test_submitting_for_another_customer_is_400_not_visible(client, operations, other_customer):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": operations, "customer": str(other_customer.pk)},
        format="json",
    )

    assert (response.status_code, list(response.json())) == (400, ["customer"])
    assert Agenda.objects.count() == 0


def test_a_member_of_several_customers_must_name_one(
    client, submitter, other_customer, operations, insight
):
    MembershipFactory(user=submitter.user, customer=other_customer, role=Role.SUBMITTER)

    unnamed = client.post("/api/v1/agendas/", {"operations": operations}, format="json")
    named = client.post(
        "/api/v1/agendas/", {"operations": operations, "customer": "globex"}, format="json"
    )

    assert (unnamed.status_code, list(unnamed.json())) == (400, ["customer"])
    assert (named.status_code, named.json()["customer_slug"]) == (201, "globex")


def test_no_matching_insight_is_400_on_the_operations_type_listing_the_types_accepted(client):
    response = client.post(
        "/api/v1/agendas/", {"operations": [{"name": "a", "type": "render3d"}]}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["operations.0.type"])
    [message] = response.json()["operations.0.type"]
    assert "'render3d'" in message and "types accepted: log, mediainfo" in message


def test_bulk_submits_each_item_on_its_own(client, operations):
    response = client.post(
        "/api/v1/agendas/bulk/",
        {
            "agendas": [
                {"operations": operations, "link_id": "bulk"},
                {"operations": [{"name": "x", "type": "log", "depends_on": ["nope"]}]},
                {"operations": operations, "priority": 99},
                "not an object",
                {"operations": operations, "link_id": "bulk", "idempotency_key": "b-1"},
            ]
        },
        format="json",
    )

    assert response.status_code == 200
    results = response.json()["results"]
    assert [sorted(result) == ["errors"] for result in results] == [
        False,
        True,
        True,
        True,
        False,
    ]
    assert results[1]["errors"] == {"operations.0.depends_on": ["Unknown operation 'nope'."]}
    assert list(results[2]["errors"]) == ["priority"]
    assert list(results[3]["errors"]) == ["non_field_errors"]
    assert results[0]["state"] == "ready"
    assert results[4]["idempotency_key"] == "b-1"
    created = {str(pk) for pk in Agenda.objects.values_list("pk", flat=True)}
    assert created == {results[0]["id"], results[4]["id"]}


def test_bulk_refuses_more_than_a_thousand_items_or_none(client, operations):
    too_many = client.post(
        "/api/v1/agendas/bulk/", {"agendas": [{"operations": operations}] * 1001}, format="json"
    )
    empty = client.post("/api/v1/agendas/bulk/", {"agendas": []}, format="json")

    assert (too_many.status_code, list(too_many.json())) == (400, ["agendas"])
    assert (empty.status_code, list(empty.json())) == (400, ["agendas"])
    assert Agenda.objects.count() == 0


def test_bulk_by_a_viewer_is_403(viewer_client, operations, insight):
    response = viewer_client.post(
        "/api/v1/agendas/bulk/", {"agendas": [{"operations": operations}]}, format="json"
    )

    assert response.status_code == 403
    assert Agenda.objects.count() == 0


def test_bulk_cannot_submit_for_another_customer(client, operations, other_customer):
    response = client.post(
        "/api/v1/agendas/bulk/",
        {"agendas": [{"operations": operations, "customer": "globex"}]},
        format="json",
    )

    assert list(response.json()["results"][0]["errors"]) == ["customer"]
    assert Agenda.objects.count() == 0


def test_the_list_shows_only_your_customers_agendas_and_filters(
    client, submitter, other_submitter, agenda_in_state
):
    ready = agenda_in_state(submitter, "ready", link_id="L1")
    paused = agenda_in_state(submitter, "paused", link_id="L2")
    agenda_in_state(other_submitter, "ready", link_id="L1")

    everything = client.get("/api/v1/agendas/").json()
    by_link = client.get("/api/v1/agendas/", {"link_id": "L1"}).json()
    by_state = client.get("/api/v1/agendas/", {"state": ["paused", "failed"]}).json()

    assert everything["count"] == 2
    assert [row["id"] for row in by_link["results"]] == [str(ready.pk)]
    assert [row["id"] for row in by_state["results"]] == [str(paused.pk)]


def test_the_list_filters_by_creation_time_and_orders(client, submitter, agenda_in_state):
    old = agenda_in_state(submitter, "ready", priority=1)
    new = agenda_in_state(submitter, "ready", priority=9)
    Agenda.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    cutoff = (timezone.now() - timedelta(days=1)).isoformat()

    recent = client.get("/api/v1/agendas/", {"created_after": cutoff}).json()["results"]
    by_priority = client.get("/api/v1/agendas/", {"ordering": "priority"}).json()["results"]

    assert [row["id"] for row in recent] == [str(new.pk)]
    assert [row["id"] for row in by_priority] == [str(old.pk), str(new.pk)]


def test_bad_filter_values_are_400_by_parameter(client):
    response = client.get(
        "/api/v1/agendas/", {"state": "sleeping", "customer": "x", "created_after": "soon"}
    )

    assert response.status_code == 400
    assert set(response.json()) == {"state", "customer", "created_after"}


def test_pagination_is_limit_offset_capped_at_a_thousand(client, submitter, agenda_in_state):
    for _ in range(3):
        agenda_in_state(submitter, "ready")

    page = client.get("/api/v1/agendas/", {"limit": 2, "offset": 1}).json()
    capped = client.get("/api/v1/agendas/", {"limit": 5000}).json()

    assert (page["count"], len(page["results"])) == (3, 2)
    assert page["next"] is None and page["previous"] is not None
    assert len(capped["results"]) == 3


def test_the_detail_embeds_progress_and_repeats_its_state(client, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "executing")

    body = client.get(f"/api/v1/agendas/{agenda.pk}/").json()

    assert (body["state"], body["processing_state"]) == ("executing", "executing")
    assert body["progress"]["state"] == "executing"
    assert body["progress"]["attempts_completed"] == 0
    assert [op["state"] for op in body["progress"]["operations"]] == ["waiting", "waiting"]


def test_another_customers_agenda_is_404(client, other_submitter, agenda_in_state):
    agenda = agenda_in_state(other_submitter, "ready")

    assert client.get(f"/api/v1/agendas/{agenda.pk}/").status_code == 404
    assert client.get(f"/api/v1/agendas/{agenda.pk}/executions/").status_code == 404
    assert client.get("/api/v1/agendas/not-a-uuid/").status_code == 404


def test_executions_list_the_attempts_without_their_lease_tokens(
    client, submitter, agenda_in_state
):
    agenda = agenda_in_state(submitter, "executing")

    response = client.get(f"/api/v1/agendas/{agenda.pk}/executions/")

    assert response.status_code == 200
    (attempt,) = response.json()["results"]
    assert (attempt["number"], attempt["worker"], attempt["outcome"]) == (1, "w1", None)
    assert "lease_token" not in attempt


def test_agenda_progress_state_is_never_written_by_the_api_layer(
    client, submitter, agenda_in_state
):
    agenda = agenda_in_state(submitter, "ready")

    response = client.patch(f"/api/v1/agendas/{agenda.pk}/", {"priority": 1}, format="json")

    assert response.status_code == 405
    assert AgendaProgress.objects.get(agenda=agenda).state == "ready"


def test_id_prefix_finds_agendas_by_the_ids_the_pages_show_and_only_visible_ones(
    submitter, other_submitter, submit_agenda, api_client_for
):
    mine = submit_agenda(submitter)
    theirs = submit_agenda(other_submitter)
    client = api_client_for(submitter)

    found = client.get("/api/v1/agendas/", {"id_prefix": str(mine.pk)[:8]}).json()["results"]
    hidden = client.get("/api/v1/agendas/", {"id_prefix": str(theirs.pk)[:13]}).json()
    refused = client.get("/api/v1/agendas/", {"id_prefix": "xyz!"})

    assert [row["id"] for row in found] == [str(mine.pk)]
    assert hidden["results"] == []
    assert refused.status_code == 400 and "id_prefix" in refused.json()


def test_id_prefix_is_a_range_of_the_primary_key_not_a_text_match(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    rows = AgendaFilter({"id_prefix": str(agenda.pk)[:6]}, queryset=Agenda.objects.all()).qs

    sql = str(rows.query)
    assert "LIKE" not in sql.upper() and ">=" in sql and "<=" in sql
    assert list(rows) == [agenda]


def test_a_list_filtered_only_by_state_counts_its_progress_rows_without_the_agendas_join(
    client, staff_client, submitter, other_submitter, agenda_in_state
):
    from django.db import connection

    for _ in range(2):
        agenda_in_state(submitter, "paused")
    agenda_in_state(submitter, "ready")
    agenda_in_state(other_submitter, "paused")
    theirs = str(other_submitter.customer.pk)
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        own = client.get("/api/v1/agendas/", {"state": "paused"}).json()
    everyone = staff_client.get("/api/v1/agendas/", {"state": ["paused", "ready"]}).json()
    one_customer = staff_client.get("/api/v1/agendas/", {"state": "paused", "customer": theirs})
    foreign = client.get("/api/v1/agendas/", {"state": "paused", "customer": theirs}).json()
    with_another_filter = client.get("/api/v1/agendas/", {"state": "paused", "priority": 1})

    assert own["count"] == len(own["results"]) == 2
    assert everyone["count"] == len(everyone["results"]) == 4
    assert one_customer.json()["count"] == 1
    assert (foreign["count"], foreign["results"]) == (0, [])
    assert with_another_filter.status_code == 200
    counts = [sql for sql in statements if sql.startswith("SELECT COUNT(*) FROM (SELECT")]
    assert len(counts) == 1, statements
    assert '"agendas_agendaprogress"' in counts[0] and '"agendas_agenda"' not in counts[0]
