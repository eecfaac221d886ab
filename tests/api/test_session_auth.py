"""Session authentication on the API (docs/design.md §10): reads work, writes need the CSRF
token."""

import json

import pytest
from django.test import Client

from accounts.services import token_issue
from agendas.models import Agenda
from core.principals import SYSTEM

pytestmark = pytest.mark.django_db
AGENDAS = "/api/v1/agendas/"


@pytest.fixture
def browser(submitter, insight) -> Client:
    """A logged-in Acme submitter's browser that enforces CSRF like a real one."""
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(submitter.user)
    return browser


def post_json(client: Client, body: dict, **headers: str):
    return client.post(AGENDAS, json.dumps(body), content_type="application/json", **headers)


def csrf_token(client: Client) -> str:
    """The token a page gives the browser (the login page sets the cookie)."""
    client.get("/accounts/login/")
    return client.cookies["csrftoken"].value


def test_a_logged_in_user_lists_their_customers_agendas(
    browser, submitter, other_submitter, submit_agenda
):
    mine = submit_agenda(submitter)
    submit_agenda(other_submitter)

    response = browser.get(AGENDAS)

    assert response.status_code == 200
    assert [row["id"] for row in response.json()["results"]] == [str(mine.pk)]


def test_a_login_with_the_form_authenticates_the_api(submitter, insight, submit_agenda):
    submitter.user.set_password("s3cret-pass")
    submitter.user.save()
    submit_agenda(submitter)
    browser = Client(enforce_csrf_checks=True)

    logged_in = browser.post(
        "/accounts/login/",
        {"username": submitter.user.username, "password": "s3cret-pass"},
        HTTP_X_CSRFTOKEN=csrf_token(browser),
    )

    assert logged_in.status_code == 302
    assert browser.get(AGENDAS).json()["count"] == 1


def test_a_session_post_without_the_csrf_token_is_403_and_submits_nothing(browser, operations):
    csrf_token(browser)  # the cookie alone is not enough: the header must repeat it

    response = post_json(browser, {"operations": operations})

    assert response.status_code == 403
    assert response.json()["detail"].startswith("CSRF Failed")
    assert not Agenda.objects.exists()


def test_a_session_post_with_the_csrf_token_submits(browser, operations, submitter):
    response = post_json(browser, {"operations": operations}, HTTP_X_CSRFTOKEN=csrf_token(browser))

    assert response.status_code == 201, response.json()
    assert Agenda.objects.get().customer == submitter.customer


def test_a_wrong_csrf_token_is_refused(browser, operations):
    csrf_token(browser)

    response = post_json(browser, {"operations": operations}, HTTP_X_CSRFTOKEN="x" * 32)

    assert response.status_code == 403
    assert not Agenda.objects.exists()


def test_token_authentication_needs_no_csrf_token(submitter, insight, operations):
    caller = Client(enforce_csrf_checks=True)
    key = token_issue(principal=SYSTEM, user=submitter.user, name="script").key

    response = post_json(caller, {"operations": operations}, HTTP_AUTHORIZATION=f"Token {key}")

    assert response.status_code == 201, response.json()


def test_after_logout_the_session_no_longer_authenticates(browser):
    browser.logout()

    assert browser.get(AGENDAS).status_code == 401
