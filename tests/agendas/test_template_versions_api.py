"""Template versions through every interface: the API (`agenda-templates/{id}/versions/`, run
and preview `version`, schedules' `template_version`, the agenda's `template_version`), the
template page, the admin and the `pop` CLI (docs/design.md §5.3)."""

import io
import json
import os
from unittest import mock

import httpx
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agendas.models import Agenda, AgendaTemplate
from agendas.template_services import agenda_template_create, agenda_template_update
from popclient.cli import main
from popclient.client import PopClient
from scheduling.models import Schedule
from tests.factories import AgendaTemplateFactory

pytestmark = pytest.mark.django_db

BODY = {
    "operations": [
        {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}},
    ],
}
LOG_BODY = {
    "operations": [
        {"name": "probe", "type": "log", "payload": {"url": "@<pop.payload::/url>"}},
    ],
}


@pytest.fixture(autouse=True)
def _no_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def template(admin_member, insight) -> AgendaTemplate:
    """probe-it with versions 1 (mediainfo) and 2 (log), saved by acme's admin."""
    template = agenda_template_create(
        principal=admin_member.user, customer=admin_member.customer, name="probe-it", agenda=BODY
    )
    agenda_template_update(
        principal=admin_member.user, template=template, agenda=LOG_BODY, note="log instead"
    )
    return template


@pytest.fixture
def client(submitter, api_client_for):
    return api_client_for(submitter)


@pytest.fixture
def admin_client(admin_member, api_client_for):
    return api_client_for(admin_member)


def url(template, tail: str = "") -> str:
    return f"/api/v1/agenda-templates/{template.pk}/{tail}"


# --- reading versions ----------------------------------------------------------------------


def test_the_versions_list_is_newest_first_with_author_and_note(client, template):
    response = client.get(url(template, "versions/"))

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(row["number"], row["author"], row["note"]) for row in rows] == [
        (2, "acme-admin", "log instead"),
        (1, "acme-admin", ""),
    ]
    assert response.json()["count"] == 2
    assert "agenda" not in rows[0]


def test_the_versions_list_is_paginated_and_its_queries_do_not_grow_with_versions(
    client, template, admin_member
):
    client.get(url(template, "versions/"))  # the token's and the throttle's first reads
    with CaptureQueriesContext(connection) as few:
        client.get(url(template, "versions/"))
    for size in range(3, 8):
        agenda_template_update(
            principal=admin_member.user, template=template, static_parameters={"size": size}
        )

    with CaptureQueriesContext(connection) as many:
        page = client.get(url(template, "versions/?limit=2&offset=1")).json()

    assert [row["number"] for row in page["results"]] == [6, 5]
    assert page["count"] == 7
    assert len(many.captured_queries) == len(few.captured_queries)


def test_one_version_shows_what_a_run_of_it_expands(client, template):
    response = client.get(url(template, "versions/1/"))

    assert response.status_code == 200
    assert response.json()["agenda"] == BODY
    assert (response.json()["number"], response.json()["payload_schema"]) == (1, None)


@pytest.mark.parametrize("number", ["3", "0", "9999999999"])
def test_a_version_the_template_lacks_is_404(client, template, number):
    assert client.get(url(template, f"versions/{number}/")).status_code == 404


def test_the_diff_endpoint_shows_exactly_the_changed_lines(client, template):
    response = client.get(url(template, "versions/diff/?from=1&to=2"))

    assert response.status_code == 200
    body = response.json()
    changed = [
        line for line in body["diff"] if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == ['-        "type": "mediainfo"', '+        "type": "log"']
    assert (body["from"], body["to"], body["changed"]) == (1, 2, True)


@pytest.mark.parametrize(
    ("query", "field"),
    [("to=2", "from"), ("from=x&to=2", "from"), ("from=1&to=0", "to"), ("from=1&to=5", "to")],
)
def test_a_bad_or_unknown_diff_side_is_400_naming_it(client, template, query, field):
    response = client.get(url(template, f"versions/diff/?{query}"))

    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_another_customers_template_versions_are_404_like_the_template(
    other_submitter, api_client_for, template
):
    other = api_client_for(other_submitter)

    statuses = [
        other.get(url(template)).status_code,
        other.get(url(template, "versions/")).status_code,
        other.get(url(template, "versions/1/")).status_code,
        other.get(url(template, "versions/diff/?from=1&to=2")).status_code,
    ]

    assert statuses == [404] * 4


def test_a_shared_templates_readers_see_its_versions_without_its_authors(
    other_submitter, api_client_for, template, customer, insight
):
    template.allowed_customers.add(other_submitter.customer)
    other = api_client_for(other_submitter)

    rows = other.get(url(template, "versions/")).json()["results"]
    run = other.post(url(template, "run/"), {"payload": {"url": "u"}, "version": 1})

    assert [(row["number"], row["author"]) for row in rows] == [(2, None), (1, None)]
    assert (run.status_code, run.json()["template_version"]) == (201, 1)


# --- writing: saves, runs, previews --------------------------------------------------------


def test_a_patch_with_a_note_adds_a_version_and_one_of_the_description_does_not(
    admin_client, template
):
    described = admin_client.patch(url(template), {"description": "words"})
    changed = admin_client.patch(url(template), {"agenda": BODY, "note": "back to mediainfo"})

    assert (described.status_code, changed.status_code) == (200, 200)
    assert "note" not in changed.json()
    assert (described.json()["latest_version"], changed.json()["latest_version"]) == (2, 3)
    [listed] = admin_client.get("/api/v1/agenda-templates/").json()["results"]
    assert listed["latest_version"] == 3
    assert [(v.number, v.note) for v in template.versions.order_by("number")] == [
        (1, ""),
        (2, "log instead"),
        (3, "back to mediainfo"),
    ]


def test_a_run_through_the_api_records_its_version_in_the_agenda(client, template):
    latest = client.post(url(template, "run/"), {"payload": {"url": "u"}})
    pinned = client.post(url(template, "run/"), {"payload": {"url": "u"}, "version": 1})

    assert (latest.status_code, latest.json()["template_version"]) == (201, 2)
    assert pinned.json()["operations"][0]["type"] == "mediainfo"
    detail = client.get(f"/api/v1/agendas/{pinned.json()['id']}/").json()
    assert detail["template_version"] == 1


@pytest.mark.parametrize("version", [7, 0, "two", 2**40])
def test_a_run_of_an_unknown_or_bad_version_is_400_naming_version_and_submits_nothing(
    client, template, version
):
    response = client.post(url(template, "run/"), {"payload": {"url": "u"}, "version": version})

    assert (response.status_code, list(response.json())) == (400, ["version"])
    assert not Agenda.objects.exists()


def test_a_preview_through_the_api_expands_the_version_it_names(client, template):
    response = client.post(url(template, "preview/"), {"payload": {"url": "u"}, "version": 1})

    assert response.status_code == 200
    assert response.json()["agenda"]["operations"][0]["type"] == "mediainfo"


# --- schedules -----------------------------------------------------------------------------


def test_a_schedule_pins_a_version_through_the_api_and_can_follow_the_latest_again(
    admin_client, template
):
    created = admin_client.post(
        "/api/v1/schedules/",
        {
            "name": "nightly",
            "template": str(template.pk),
            "template_version": 1,
            "cron": "0 2 * * *",
            "payload": {"url": "u"},
        },
    )
    schedule_url = f"/api/v1/schedules/{created.json()['id']}/"
    refused = admin_client.patch(schedule_url, {"template_version": 9})
    following = admin_client.patch(schedule_url, {"template_version": None})

    assert (created.status_code, created.json()["template_version"]) == (201, 1)
    assert (refused.status_code, list(refused.json())) == (400, ["template_version"])
    assert (following.status_code, following.json()["template_version"]) == (200, None)
    assert Schedule.objects.get().template_version is None


# --- the template page ---------------------------------------------------------------------


@pytest.fixture
def page_client(client, submitter):
    browser = Client()
    browser.force_login(submitter.user)
    return browser


def test_the_template_page_lists_versions_and_diffs_the_latest_two_side_by_side(
    page_client, template
):
    response = page_client.get(reverse("pages:template-detail", args=[template.pk]))

    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="version-list"' in page and "log instead" in page
    table = page.split('id="diff-table"', 1)[1].split("</table>", 1)[0]
    assert "&quot;type&quot;: &quot;mediainfo&quot;" in table
    assert "&quot;type&quot;: &quot;log&quot;" in table
    assert table.count('class="diff-replace"') == 1


def test_the_template_page_refuses_an_unknown_diff_side_with_400(page_client, template):
    response = page_client.get(
        reverse("pages:template-detail", args=[template.pk]), {"from": "1", "to": "8"}
    )

    assert response.status_code == 400
    assert "has no version 8" in response.content.decode()


def test_another_customers_template_page_is_404_with_or_without_a_diff(page_client, other_customer):
    theirs = AgendaTemplateFactory(customer=other_customer, name="theirs")
    address = reverse("pages:template-detail", args=[theirs.pk])

    assert page_client.get(address).status_code == 404
    assert page_client.get(address, {"from": "1", "to": "2"}).status_code == 404


def test_the_agenda_page_names_the_template_version_it_was_expanded_from(
    page_client, client, template
):
    agenda_id = client.post(url(template, "run/"), {"payload": {"url": "u"}}).json()["id"]

    page = page_client.get(reverse("pages:agenda-detail", args=[agenda_id])).content.decode()

    assert '<span id="template-version">version 2</span>' in page


# --- the admin -----------------------------------------------------------------------------


def test_saving_a_template_in_the_admin_adds_a_version_it_then_lists(staff_user, template):
    operator = Client()
    operator.force_login(staff_user)
    change = reverse("admin:agendas_agendatemplate_change", args=[template.pk])
    form = {
        "name": template.name,
        "customer": str(template.customer_id),
        "description": "",
        "agenda": json.dumps(BODY),
        "static_parameters": "{}",
        "payload_schema": "null",
        "link_id": "",
        "cid": "",
    }

    saved = operator.post(change, form)
    shown = operator.get(change).content.decode()

    assert saved.status_code == 302, saved.content.decode()[:2000]
    assert [(v.number, v.author, v.note) for v in template.versions.order_by("-number")][0] == (
        3,
        staff_user,
        "saved in the admin",
    )
    assert "saved in the admin" in shown and "log instead" in shown


# --- the pop CLI, against this server ------------------------------------------------------


def bridge(api_client):
    """An httpx transport answering through the Django test client (the real API)."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode().removeprefix("/api/v1")
        method = getattr(api_client, request.method.lower())
        body = request.content or None
        response = (
            method(f"/api/v1{path}")
            if body is None
            else method(f"/api/v1{path}", data=body, content_type="application/json")
        )
        return httpx.Response(response.status_code, content=response.content)

    return lambda base, token, **kwargs: PopClient(
        base, token, transport=httpx.MockTransport(handle), sleep=lambda s: None, **kwargs
    )


def pop(api_client, *argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, {"POP_TOKEN": "tok", "POP_CONFIG": "/nonexistent"}):
        code = main(
            ["--url", "http://pop.test", *argv],
            client_factory=bridge(api_client),
            stdout=stdout,
            stderr=stderr,
        )
    return code, stdout.getvalue(), stderr.getvalue()


def test_pop_templates_versions_and_diff_show_the_history(client, template):
    listed = pop(client, "templates", "versions", str(template.pk))
    diffed = pop(client, "templates", "diff", str(template.pk), "1", "2")
    same = pop(client, "templates", "diff", str(template.pk), "2", "2")

    assert listed[0] == 0 and "log instead" in listed[1]
    assert [line.split()[0] for line in listed[1].splitlines()[1:]] == ["2", "1"]
    assert diffed[0] == 0
    assert '-        "type": "mediainfo"' in diffed[1].splitlines()
    assert '+        "type": "log"' in diffed[1].splitlines()
    assert same[:2] == (0, "Versions 2 and 2 are the same.\n")


def test_pop_templates_run_with_a_version_and_pop_schedules_pin(client, admin_client, template):
    code, out, _ = pop(
        client, "--json", "templates", "run", str(template.pk), "--version", "1",
        "--payload", '{"url": "u"}',
    )  # fmt: skip
    schedule = admin_client.post(
        "/api/v1/schedules/",
        {"name": "n", "template": str(template.pk), "cron": "0 2 * * *", "payload": {"url": "u"}},
    ).json()
    pinned = pop(admin_client, "schedules", "pin", schedule["id"], "1")
    following = pop(admin_client, "schedules", "pin", schedule["id"], "latest")
    refused = pop(admin_client, "schedules", "pin", schedule["id"], "0")

    assert (code, json.loads(out)["template_version"]) == (0, 1)
    assert pinned[:2] == (0, f"Schedule {schedule['id']} runs version 1 of its template.\n")
    assert following[0] == 0 and "the latest version" in following[1]
    assert refused[0] == 2
    assert Schedule.objects.get().template_version is None


def test_the_template_page_runs_the_version_asked_for_and_refuses_an_unknown_one(
    page_client, template, submitter
):
    address = reverse("pages:template-detail", args=[template.pk])
    form = {"payload": '{"url": "u"}', "customer": submitter.customer.pk, "action": "run"}

    response = page_client.post(address, {**form, "version": "1"})
    refused = page_client.post(address, {**form, "version": "9"})

    assert response.status_code == 302
    agenda = Agenda.objects.get()
    assert agenda.template_version == 1
    assert agenda.operations[0]["type"] == "mediainfo"
    assert refused.status_code == 200 and "no version 9" in refused.content.decode()
    assert Agenda.objects.count() == 1
