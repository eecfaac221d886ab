"""Input that used to be a 500: each is now a 400 (or a form error) naming the field, and
nothing is written."""

import json

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agendas.models import Agenda, AgendaTemplate
from scheduling.models import Schedule
from tests.factories import AgendaTemplateFactory

pytestmark = pytest.mark.django_db

OPERATIONS = [{"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}}]


def nested_arrays(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


@pytest.fixture
def admin_client(admin_member, insight, api_client_for):
    client = api_client_for(admin_member)
    client.raise_request_exception = False
    return client


@pytest.fixture
def template(customer):
    return AgendaTemplateFactory(customer=customer, agenda={"operations": OPERATIONS})


@pytest.fixture
def dashboard(admin_member, insight):
    client = Client(raise_request_exception=False)
    client.force_login(admin_member.user)
    return client


@pytest.mark.parametrize(
    "option, value",
    [
        ("link_id", "x" * 256),
        ("external_id", "x" * 256),
        ("idempotency_key", "x" * 256),
        ("callback_url", "https://example.com/" + "x" * 1000),
        ("callback_url", "not a url"),
        ("callback_url", "ftp://example.com/hook"),
        ("link_id", None),
        ("default_insight", {"name": "mediainfo"}),
        ("params", ["not", "an", "object"]),
        ("run_after", "yesterday-ish"),
        ("priority", 10),
        ("max_attempts", "many"),
    ],
)
def test_a_template_body_option_is_checked_at_save_like_a_submission(admin_client, option, value):
    body = {"name": "t", "agenda": {"operations": OPERATIONS, option: value}}

    response = admin_client.post("/api/v1/agenda-templates/", body, format="json")
    bulk = admin_client.post(
        "/api/v1/agendas/bulk/",
        {"agendas": [{"operations": [{"name": "p", "type": "log"}], option: value}]},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert list(response.json()) == [f"agenda.{option}"]
    assert bulk.status_code == 200, bulk.content
    assert list(bulk.json()["results"][0]["errors"]) == [option]
    assert not AgendaTemplate.objects.exists()
    assert not Agenda.objects.exists()


def test_a_template_with_run_after_runs_and_the_agenda_waits(admin_client):
    created = admin_client.post(
        "/api/v1/agenda-templates/",
        {
            "name": "later",
            "agenda": {"operations": OPERATIONS, "run_after": "2031-01-01T00:00:00Z"},
        },
        format="json",
    )
    assert created.status_code == 201, created.content

    run = admin_client.post(
        f"/api/v1/agenda-templates/{created.json()['id']}/run/",
        {"payload": {"url": "s3://b/a.mov"}},
        format="json",
    )

    assert run.status_code == 201, run.content
    assert Agenda.objects.get().progress.run_after.year == 2031


def test_an_option_expanded_from_the_payload_is_checked_at_run(admin_client, customer):
    template = AgendaTemplateFactory(
        customer=customer,
        agenda={
            "operations": OPERATIONS,
            "link_id": "@<pop.payload::/batch>",
            "run_after": "@<pop.payload::/when>",
        },
    )

    too_long = admin_client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/",
        {"payload": {"url": "s3://b/a", "batch": "x" * 300, "when": "2031-01-01T00:00:00Z"}},
        format="json",
    )
    not_a_time = admin_client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/",
        {"payload": {"url": "s3://b/a", "batch": "b1", "when": {"not": "a time"}}},
        format="json",
    )

    assert too_long.status_code == 400, too_long.content
    assert any(key.endswith("link_id") for key in too_long.json())
    assert not_a_time.status_code == 400, not_a_time.content
    assert any(key.endswith("run_after") for key in not_a_time.json())
    assert not Agenda.objects.exists()


def test_a_stored_template_with_a_bad_option_is_a_400_at_run_not_a_500(admin_client, customer):
    # Stored as an older build would have stored it: past the save check.
    template = AgendaTemplateFactory(
        customer=customer,
        agenda={"operations": OPERATIONS, "run_after": "soon", "link_id": "y" * 400},
    )

    response = admin_client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/",
        {"payload": {"url": "s3://b/a"}},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert not Agenda.objects.exists()


@pytest.mark.parametrize("body", [nested_arrays(1000), nested_objects(1000), nested_arrays(10**5)])
@pytest.mark.parametrize(
    "url",
    ["/api/v1/auth/token/", "/api/v1/agendas/", "/api/v1/agendas/bulk/", "/api/v1/schedules/"],
)
def test_json_nested_deeper_than_the_limit_is_a_400_on_every_endpoint(admin_client, url, body):
    anonymous = APIClient(raise_request_exception=False)

    for caller in (admin_client, anonymous):
        response = caller.post(url, body, content_type="application/json")

        assert (
            response.status_code == 400
            if caller is admin_client
            else response.status_code
            in (
                400,
                401,
            )
        ), response.content
    assert not Agenda.objects.exists()


def test_a_template_payload_nested_800_deep_is_a_400(admin_client, template):
    for action in ("preview", "run"):
        response = admin_client.post(
            f"/api/v1/agenda-templates/{template.pk}/{action}/",
            '{"payload":' + nested_objects(800) + "}",
            content_type="application/json",
        )

        assert response.status_code == 400, response.content
    assert not Agenda.objects.exists()


@pytest.mark.parametrize(
    "query", ["link_id=%00", "link_id=%ED%A0%80", "cid=%00", "link_id=" + "a" * 5000]
)
def test_control_characters_and_broken_utf8_in_query_strings_are_not_500(
    dashboard, admin_client, query
):
    for page in ("/progress/", "/agendas/", "/"):
        assert dashboard.get(f"{page}?{query}").status_code < 500, page
    for url in ("/api/v1/agendas/", "/api/v1/progress-summary/", "/api/v1/schedules/"):
        assert admin_client.get(f"{url}?{query}").status_code < 500, url


@pytest.mark.parametrize(
    "payload_text",
    ['{"url": "\\u0000"}', '{"url": "\\ud800"}', "\x00", nested_objects(800), nested_arrays(5000)],
)
def test_the_template_pages_run_form_refuses_bad_payloads_as_form_errors(
    dashboard, template, customer, payload_text
):
    for action in ("preview", "run"):
        response = dashboard.post(
            f"/templates/{template.pk}/",
            {"payload": payload_text, "action": action, "customer": str(customer.pk)},
        )

        assert response.status_code in (200, 400), response.status_code
    assert not Agenda.objects.exists()


@pytest.mark.parametrize(
    "cron, field, value",
    [
        ("0 0 1 1 *", "start_at", "9999-12-31T23:59:00Z"),
        ("0 0 1 1 *", "start_at", "9999-12-31T23:59:00-14:00"),
        ("0 0 29 2 *", "start_at", "9998-12-31T23:59:00Z"),
    ],
)
def test_a_schedule_dated_at_the_ends_of_time_is_a_400_naming_the_field(
    admin_client, template, cron, field, value
):
    response = admin_client.post(
        "/api/v1/schedules/",
        json.dumps(
            {
                "template": str(template.pk),
                "name": "edge",
                "cron": cron,
                "payload": {"url": "s3://b/a.mov"},
                field: value,
            }
        ),
        content_type="application/json",
    )

    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert not Schedule.objects.exists()
