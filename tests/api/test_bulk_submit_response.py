"""agendas/bulk/: a slim result per item, built without reading the agendas back (docs/design.md
§5.1)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agendas.models import Agenda
from agendas.services import agenda_pause

pytestmark = pytest.mark.django_db

SLIM_FIELDS = [
    "customer",
    "external_id",
    "id",
    "idempotency_key",
    "insight",
    "link_id",
    "processing_state",
    "state",
]


def _bulk(client, agendas):
    return client.post("/api/v1/agendas/bulk/", {"agendas": agendas}, format="json")


def test_each_created_agenda_comes_back_slim_with_its_state(client, customer, insight, operations):
    response = _bulk(
        client,
        [
            {"operations": operations, "link_id": "L", "external_id": "x-1"},
            {"operations": operations, "do_not_run": True, "idempotency_key": "k"},
            {"operations": [{"name": "a", "type": "render3d"}]},
        ],
    )

    assert response.status_code == 200
    ready, held, refused = response.json()["results"]
    assert sorted(ready) == SLIM_FIELDS
    agenda = Agenda.objects.get(pk=ready["id"])
    assert ready == {
        "id": str(agenda.pk),
        "customer": str(customer.pk),
        "insight": str(insight.pk),
        "link_id": "L",
        "external_id": "x-1",
        "idempotency_key": "",
        "state": "ready",
        "processing_state": "waiting",
    }
    assert (held["state"], held["idempotency_key"]) == ("pending", "k")
    assert list(refused) == ["errors"] and list(refused["errors"]) == ["operations.0.type"]


def test_a_repeated_key_answers_the_earlier_agenda_in_its_current_state(
    client, submitter, operations
):
    first = _bulk(client, [{"operations": operations, "idempotency_key": "again"}]).json()
    agenda = Agenda.objects.get(pk=first["results"][0]["id"])
    agenda_pause(principal=submitter.user, agenda=agenda)

    again = _bulk(
        client,
        [
            {"operations": operations, "idempotency_key": "again"},
            {"operations": operations, "idempotency_key": "fresh"},
            {"operations": operations, "idempotency_key": "fresh"},
        ],
    ).json()["results"]

    assert (again[0]["id"], again[0]["state"]) == (str(agenda.pk), "paused")
    assert again[1] == again[2]
    assert Agenda.objects.count() == 2


def test_the_bulk_request_costs_the_same_queries_for_10_and_200_items(client, operations):
    def submit(n, tag):
        items = [{"operations": operations, "idempotency_key": f"{tag}-{i}"} for i in range(n)]
        with CaptureQueriesContext(connection) as queries:
            response = _bulk(client, items)
        assert response.status_code == 200
        assert all("errors" not in result for result in response.json()["results"])
        return len(queries)

    submit(1, "warm")  # the token's first use this minute stamps its last_used_at
    assert submit(200, "large") == submit(10, "small")
    assert Agenda.objects.count() == 211
