"""Cross-cutting API behaviour: tokens, 401, X-POP-CID, 400 paths, 413, 415, 429 (docs/design.md
§10)."""

import io
import json

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from agendas.models import Agenda, AgendaProgress, OperationProgress
from core.api import LimitedJSONParser, PayloadTooLarge, flatten_errors
from core.throttling import AnonRateThrottle, UserRateThrottle

pytestmark = pytest.mark.django_db


def test_token_exchange_returns_a_token_that_authenticates(submitter):
    anonymous = APIClient()

    response = anonymous.post(
        "/api/v1/auth/token/",
        {"username": submitter.user.username, "password": "secret-password"},
        format="json",
    )

    assert response.status_code == 200
    assert response.json()["username"] == submitter.user.username
    anonymous.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    customers = anonymous.get("/api/v1/customers/").json()["results"]
    assert [customer["slug"] for customer in customers] == ["acme"]


def test_token_exchange_with_a_wrong_password_is_400(submitter):
    response = APIClient().post(
        "/api/v1/auth/token/",
        {"username": submitter.user.username, "password": "wrong"},
        format="json",
    )

    assert response.status_code == 400
    assert list(response.json()) == ["non_field_errors"]


def test_requests_without_credentials_are_401():
    response = APIClient().get("/api/v1/agendas/")

    assert response.status_code == 401
    assert "detail" in response.json()


def test_the_correlation_id_is_echoed_and_stamped_on_every_row_created(client, operations):
    response = client.post(
        "/api/v1/agendas/", {"operations": operations}, format="json", HTTP_X_POP_CID="req-42"
    )

    assert response.status_code == 201
    assert response["X-POP-CID"] == "req-42"
    agenda = Agenda.objects.get(pk=response.json()["id"])
    assert agenda.cid == "req-42"
    assert AgendaProgress.objects.get(agenda=agenda).cid == "req-42"
    assert set(OperationProgress.objects.values_list("cid", flat=True)) == {"req-42"}


def test_a_generated_correlation_id_comes_back_when_none_is_sent(client):
    response = client.get("/api/v1/agendas/")

    assert len(response["X-POP-CID"]) == 32


def test_nested_input_errors_come_back_by_field_path(client):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": [{"name": "a", "type": "log"}, {"name": "", "type": "log"}], "priority": 12},
        format="json",
    )

    assert response.status_code == 400
    assert set(response.json()) == {"operations.1.name", "priority"}
    assert Agenda.objects.count() == 0


def test_domain_validation_errors_come_back_by_field_path(client):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": [{"name": "a", "type": "log", "depends_on": ["missing"]}]},
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"operations.0.depends_on": ["Unknown operation 'missing'."]}


def test_unknown_operation_fields_are_400_not_silently_dropped(client):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": [{"name": "a", "type": "log", "colour": "red"}]},
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"operations.0.non_field_errors": ["Unknown fields: colour."]}


def test_null_characters_are_400_not_a_database_error(client):
    response = client.post(
        "/api/v1/agendas/",
        {"operations": [{"name": "a", "type": "log", "payload": {"text": "a\x00b"}}]},
        format="json",
    )

    assert response.status_code == 400
    assert "operations.0.payload" in response.json()
    assert Agenda.objects.count() == 0


def test_lone_surrogates_in_json_values_are_400_not_a_database_error(client):
    body = '{"operations": [{"name": "x", "type": "log", "payload": {"\\ud800": 1}}]}'

    response = client.post("/api/v1/agendas/", body, content_type="application/json")

    assert (response.status_code, list(response.json())) == (400, ["operations.0.payload"])
    assert Agenda.objects.count() == 0


def test_a_json_body_over_one_mebibyte_is_413_and_writes_nothing(client):
    big = "x" * (settings.POP_MAX_BODY_BYTES + 10)

    response = client.post(
        "/api/v1/agendas/",
        {"operations": [{"name": "a", "type": "log", "payload": big}]},
        format="json",
    )

    assert response.status_code == 413
    assert response.json() == {"detail": "The request body is larger than 1 MiB."}
    assert Agenda.objects.count() == 0


def test_a_bulk_body_over_one_mebibyte_is_413(client, operations):
    item = {"operations": operations, "params": {"pad": "y" * 2000}}

    response = client.post("/api/v1/agendas/bulk/", {"agendas": [item] * 600}, format="json")

    assert response.status_code == 413
    assert Agenda.objects.count() == 0


def test_the_json_parser_refuses_an_oversized_stream_even_without_a_length():
    stream = io.BytesIO(json.dumps({"pad": "z" * settings.POP_MAX_BODY_BYTES}).encode())

    with pytest.raises(PayloadTooLarge):
        LimitedJSONParser().parse(stream, "application/json", {})


def test_a_body_that_is_not_json_is_415(client):
    response = client.post("/api/v1/agendas/", "operations=x", content_type="text/plain")

    assert response.status_code == 415


def test_throttled_callers_get_429_with_retry_after(client, monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "2/minute"})

    statuses = [client.get("/api/v1/agendas/").status_code for _ in range(3)]

    assert statuses == [200, 200, 429]
    assert int(client.get("/api/v1/agendas/")["Retry-After"]) > 0


def test_the_token_exchange_is_throttled_per_client(submitter, monkeypatch):
    monkeypatch.setattr(AnonRateThrottle, "THROTTLE_RATES", {"anon": "1/minute"})
    body = {"username": submitter.user.username, "password": "wrong"}

    statuses = [
        APIClient().post("/api/v1/auth/token/", body, format="json").status_code for _ in range(2)
    ]

    assert statuses == [400, 429]


def test_flatten_errors_turns_nested_errors_into_paths():
    nested = {
        "operations": [{}, {"name": ["blank"], "depends_on": {0: ["bad"]}}],
        "priority": ["too big"],
        "non_field_errors": ["whole thing"],
    }

    assert flatten_errors(nested) == {
        "operations.1.name": ["blank"],
        "operations.1.depends_on.0": ["bad"],
        "priority": ["too big"],
        "non_field_errors": ["whole thing"],
    }
    assert flatten_errors(["just a message"]) == {"non_field_errors": ["just a message"]}


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/api/v1/customers/", "resource_pool"),
        ("/api/v1/resource-pools/", "owner"),
        ("/api/v1/insights/", "resource_pool"),
        ("/api/v1/agenda-templates/", "customer"),
        ("/api/v1/agendas/", "insight"),
        ("/api/v1/agenda-progress/", "agenda"),
        ("/api/v1/operation-progress/", "agenda"),
        ("/api/v1/schedules/", "template"),
        ("/api/v1/callback-deliveries/", "agenda"),
        ("/api/v1/queues/", "resource_pool"),
        ("/api/v1/alerts/", "rule"),
    ],
)
def test_every_list_answers_a_malformed_filter_with_400_naming_it(client, path, parameter):
    response = client.get(path, {parameter: "not-an-id", "created_after": "2026-01-01T00:00Z"})

    assert response.status_code == 400
    assert list(response.json()) == [parameter]


def test_the_progress_and_operation_lists_find_an_agendas_rows_by_its_correlation_id(
    client, other_client, customer, operations
):
    def submit(caller, cid: str) -> str:
        answer = caller.post(
            "/api/v1/agendas/", {"operations": operations}, format="json", HTTP_X_POP_CID=cid
        )
        assert answer.status_code == 201
        return answer.json()["id"]

    wanted = submit(client, "req-1")
    submit(client, "req-2")
    submit(other_client, "req-1")  # another customer's, under the same cid

    progress = client.get("/api/v1/agenda-progress/?cid=req-1").json()["results"]
    found = client.get("/api/v1/operation-progress/?cid=req-1").json()["results"]

    assert [row["agenda"] for row in progress] == [wanted]
    assert {row["agenda"] for row in found} == {wanted}
    assert len(found) == len(operations)
    assert client.get("/api/v1/agenda-progress/?cid=req-9").json()["results"] == []
