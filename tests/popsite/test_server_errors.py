"""An unhandled error (popsite/server_errors.py): JSON on the API, never an HTML page; a
database that cannot be reached is 503 with Retry-After, on the API and on the pages."""

import pytest
from django.db import InterfaceError, OperationalError
from django.test import Client

from agendas.api.views import AgendaViewSet

pytestmark = pytest.mark.django_db


def raising(error):
    def boom(*args, **kwargs):
        raise error

    return boom


@pytest.mark.parametrize(
    "error", [OperationalError("sorry, too many clients already"), InterfaceError("closed")]
)
def test_an_unreachable_database_is_503_json_with_retry_after_on_the_api(
    monkeypatch, submitter, api_client_for, error
):
    monkeypatch.setattr(AgendaViewSet, "list", raising(error))
    client = api_client_for(submitter)
    client.raise_request_exception = False

    response = client.get("/api/v1/agendas/")

    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert response["Retry-After"] == "5"
    assert "Retry" in response.json()["detail"]
    assert "too many clients" not in response.content.decode()  # no internals


def test_any_other_unhandled_api_error_is_a_json_500_naming_the_correlation_id(
    monkeypatch, submitter, api_client_for
):
    monkeypatch.setattr(AgendaViewSet, "list", raising(RuntimeError("internal detail")))
    client = api_client_for(submitter)
    client.raise_request_exception = False

    response = client.get("/api/v1/agendas/", HTTP_X_POP_CID="cid-123")

    assert response.status_code == 500
    assert response.json() == {
        "detail": "Internal server error. Correlation id cid-123 finds it in the server's logs."
    }


def test_a_page_is_told_the_database_is_unavailable_with_503(monkeypatch, submitter):
    monkeypatch.setattr("agendas.views.agenda_search", raising(OperationalError("down")))
    client = Client(raise_request_exception=False)
    client.force_login(submitter.user)

    response = client.get("/agendas/")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert "Service unavailable" in response.content.decode()
