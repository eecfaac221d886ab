"""Agenda labels (docs/design.md §5.1): set at submit and by template runs, filtered with
`?label=key:value` (repeatable, ANDed, inside the caller's scope), shown and sent in callbacks."""

import pytest
from django.db import connection, transaction

from agendas.labels import labels_matching
from agendas.models import Agenda
from scheduling.models import CallbackDelivery

pytestmark = pytest.mark.django_db


def submit(client, operations, **fields):
    response = client.post("/api/v1/agendas/", {"operations": operations, **fields}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def listed(client, query):
    response = client.get(f"/api/v1/agendas/?{query}")
    assert response.status_code == 200, response.json()
    return {row["id"] for row in response.json()["results"]}


def test_labels_given_at_submit_are_kept_and_answered(client, operations):
    body = submit(client, operations, labels={"batch": "42", "team/owner": "video"})

    assert body["labels"] == {"batch": "42", "team/owner": "video"}
    assert Agenda.objects.get(pk=body["id"]).labels == {"batch": "42", "team/owner": "video"}


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"bad key": "x"}, "labels.bad key"),
        ({"a:b": "x"}, "labels.a:b"),
        ({"k": 3}, "labels.k"),
        ({"k": "x" * 257}, "labels.k"),
        ({"k": "line\nbreak"}, "labels.k"),
        ({f"k{n}": "v" for n in range(33)}, "labels"),
        (["not", "a", "map"], "labels"),
    ],
)
def test_bad_labels_are_400_naming_the_label_and_nothing_is_written(
    client, operations, labels, field
):
    response = client.post(
        "/api/v1/agendas/", {"operations": operations, "labels": labels}, format="json"
    )

    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert Agenda.objects.count() == 0


def test_label_filters_are_anded_and_combine_with_the_other_filters(client, operations):
    both = submit(client, operations, labels={"batch": "42", "kind": "proxy"}, link_id="L")
    one = submit(client, operations, labels={"batch": "42", "kind": "master"}, link_id="L")
    submit(client, operations, labels={"batch": "43", "kind": "proxy"}, link_id="L")

    assert listed(client, "label=batch:42") == {both["id"], one["id"]}
    assert listed(client, "label=batch:42&label=kind:proxy") == {both["id"]}
    assert listed(client, "label=batch:42&label=batch:43") == set()
    assert listed(client, "label=batch:42&link_id=L&state=ready") == {both["id"], one["id"]}
    assert listed(client, "label=batch:42&link_id=other") == set()


def test_a_label_value_may_hold_colons_and_commas(client, operations):
    odd = submit(client, operations, labels={"source": "s3://in/a,b.mp4"})

    assert listed(client, "label=source:s3://in/a,b.mp4") == {odd["id"]}


def test_another_customers_labels_are_never_matched(client, other_client, operations):
    mine = submit(client, operations, labels={"batch": "42"})
    submit(other_client, operations, labels={"batch": "42"})

    assert listed(client, "label=batch:42") == {mine["id"]}


@pytest.mark.parametrize("query", ["label=nocolon", "label=bad%20key:1", "label=:x"])
def test_a_malformed_label_filter_is_400_naming_label(client, operations, query):
    response = client.get(f"/api/v1/agendas/?{query}")

    assert response.status_code == 400
    assert "label" in response.json()


def test_more_label_filters_than_an_agenda_can_hold_is_400_naming_label(client):
    query = "&".join(f"label=k{n}:v" for n in range(33))

    response = client.get(f"/api/v1/agendas/?{query}")

    assert response.status_code == 400
    assert "At most 32" in response.json()["label"][0]


def test_a_template_run_adds_its_labels_to_the_bodys(client, admin_client, operations, insight):
    created = admin_client.post(
        "/api/v1/agenda-templates/",
        {
            "name": "labelled",
            "agenda": {"operations": operations, "labels": {"kind": "proxy", "team": "a"}},
        },
        format="json",
    )
    assert created.status_code == 201, created.json()

    run = client.post(
        f"/api/v1/agenda-templates/{created.json()['id']}/run/",
        {"payload": {}, "labels": {"team": "b", "batch": "7"}},
        format="json",
    )

    assert run.status_code == 201, run.json()
    assert Agenda.objects.get(pk=run.json()["id"]).labels == {
        "kind": "proxy",
        "team": "b",
        "batch": "7",
    }


def test_callbacks_carry_the_labels(client, operations, customer):
    customer.callback_url = "https://hooks.example.com/pop"
    customer.save()
    body = submit(client, operations, labels={"batch": "42"})

    assert client.post(f"/api/v1/agendas/{body['id']}/abort/").status_code == 200

    delivery = CallbackDelivery.objects.get(agenda_id=body["id"])
    assert delivery.body["labels"] == {"batch": "42"}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the GIN index is PostgreSQL's")
def test_a_label_filter_is_served_by_the_gin_index(client, operations, customer):
    from tests.scheduling.conftest import clone_ready_agendas

    common = submit(client, operations, labels={"batch": "1"})
    clone_ready_agendas(Agenda.objects.get(pk=common["id"]), 5000)  # the customer's history
    submit(client, operations, labels={"batch": "42"})
    query = labels_matching(Agenda.objects.filter(customer=customer), [("batch", "42")])
    sql, params = query.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ANALYZE agendas_agenda")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "agenda_labels" in plan, plan


@pytest.mark.parametrize("query", ["", "?label=tier:gold", "?label=tier:gold&label=a:b"])
def test_the_browsable_api_draws_the_agenda_list_with_its_label_filter(client, query):
    response = client.get(f"/api/v1/agendas/{query}", HTTP_ACCEPT="text/html")

    assert response.status_code == 200
    assert 'name="label"' in response.content.decode()
