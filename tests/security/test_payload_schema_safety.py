"""A template's payload_schema reaches no file, no URL and no backtracking regex engine.

A schema is checked when the template is saved (one self-contained draft 2020-12 document,
every `$ref` internal and resolvable, every pattern RE2) and applied at run with a registry
that retrieves nothing; a schema stored before those rules is a 400 at run, never a fetch.
"""

import json
import time

import pytest

from agendas.models import Agenda, AgendaTemplate
from agendas.payload_schema import payload_errors, payload_schema_errors
from tests.factories import AgendaTemplateFactory
from tests.security.listener import marker_listener

pytestmark = pytest.mark.django_db

MARKER = "pop-secret-marker-7f3a"
OPERATIONS = {
    "operations": [
        {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}}
    ]
}


@pytest.fixture
def listener():
    """A local HTTP server that serves MARKER as a JSON schema and counts the requests."""
    with marker_listener(MARKER) as served:
        yield served


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"type": "string", "const": MARKER}))
    return path


@pytest.fixture
def admin_client(admin_member, insight, api_client_for):
    return api_client_for(admin_member)


@pytest.fixture
def submitter_client(submitter, api_client_for):
    return api_client_for(submitter)


def outside_references(listener, secret_file):
    url, _ = listener
    return [
        f"{url}/schema.json",
        f"{url}/schema.json#/",
        secret_file.as_uri(),
        f"{secret_file.as_uri()}#",
        "urn:pop:elsewhere",
        "other.json",
    ]


def test_a_schema_referring_outside_itself_is_refused_at_save_and_nothing_is_fetched(
    admin_client, listener, secret_file
):
    _, hits = listener
    for reference in outside_references(listener, secret_file):
        for schema in (
            {"$ref": reference},
            {"type": "object", "properties": {"url": {"$ref": reference}}},
            {"$defs": {"x": {"$ref": reference}}, "type": "object"},
        ):
            response = admin_client.post(
                "/api/v1/agenda-templates/",
                {"name": "t", "agenda": OPERATIONS, "payload_schema": schema},
                format="json",
            )

            assert response.status_code == 400, (reference, response.content)
            assert list(response.json()) == ["payload_schema"]
            assert MARKER not in response.content.decode()

    assert hits == []
    assert not AgendaTemplate.objects.exists()


def test_a_stored_schema_referring_outside_is_a_400_at_preview_and_run_without_a_fetch(
    customer, submitter_client, listener, secret_file
):
    _, hits = listener
    for reference in outside_references(listener, secret_file):
        # Stored as an older build would have stored it: past the save check.
        template = AgendaTemplateFactory(
            customer=customer,
            agenda=OPERATIONS,
            payload_schema={"type": "object", "properties": {"url": {"$ref": reference}}},
        )
        for action in ("preview", "run"):
            started = time.monotonic()
            response = submitter_client.post(
                f"/api/v1/agenda-templates/{template.pk}/{action}/",
                {"payload": {"url": "s3://bucket/a.mov"}},
                format="json",
            )

            assert time.monotonic() - started < 5
            assert response.status_code == 400, (reference, action, response.content)
            assert "payload_schema" in response.json()
            assert MARKER not in response.content.decode()

    assert hits == []
    assert not Agenda.objects.exists()


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#/$defs/missing"},
        {"$ref": "#"},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {"allOf": [{"$ref": "#"}]},
        {"properties": {"a": {"type": "string"}}, "$ref": "#/properties/a/type"},
        {"$ref": "#/%ZZ"},
        {"$dynamicRef": "#x"},
        {"properties": {"a": {"$id": "https://example.com/a", "type": "string"}}},
        {"$schema": "http://json-schema.org/draft-04/schema#"},
        {"type": 5},
        {"pattern": "(a"},
        {"pattern": "(?=a)b"},
        {"patternProperties": {"(?<=x)y": {}}},
        [],
        "a string",
    ],
)
def test_broken_or_looping_schemas_are_400_at_save_naming_the_field(admin_client, schema):
    response = admin_client.post(
        "/api/v1/agenda-templates/",
        {"name": "t", "agenda": OPERATIONS, "payload_schema": schema},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert list(response.json()) == ["payload_schema"]
    assert not AgendaTemplate.objects.exists()


def test_an_update_to_a_bad_schema_is_refused_and_the_template_is_unchanged(admin_client, customer):
    template = AgendaTemplateFactory(
        customer=customer, agenda=OPERATIONS, payload_schema={"type": "object"}
    )

    response = admin_client.patch(
        f"/api/v1/agenda-templates/{template.pk}/",
        {"payload_schema": {"$ref": "file:///etc/passwd"}},
        format="json",
    )

    assert response.status_code == 400
    template.refresh_from_db()
    assert template.payload_schema == {"type": "object"}


def test_internal_references_and_patterns_still_validate_payloads(admin_client, submitter_client):
    schema = {
        "type": "object",
        "$defs": {"media": {"type": "string", "pattern": "^s3://[a-z0-9-]+/"}},
        "properties": {"url": {"$ref": "#/$defs/media"}},
        "patternProperties": {"^x-": {"type": "integer"}},
        "required": ["url"],
    }
    created = admin_client.post(
        "/api/v1/agenda-templates/",
        {"name": "refs", "agenda": OPERATIONS, "payload_schema": schema},
        format="json",
    )
    assert created.status_code == 201, created.content
    template_id = created.json()["id"]

    good = submitter_client.post(
        f"/api/v1/agenda-templates/{template_id}/preview/",
        {"payload": {"url": "s3://bucket/a.mov", "x-n": 1}},
        format="json",
    )
    bad = submitter_client.post(
        f"/api/v1/agenda-templates/{template_id}/preview/",
        {"payload": {"url": "http://bucket/a.mov", "x-n": "one"}},
        format="json",
    )

    assert good.status_code == 200, good.content
    assert bad.status_code == 400
    assert set(bad.json()) == {"payload.url", "payload.x-n"}


def test_a_catastrophic_pattern_checks_a_payload_in_linear_time(customer, submitter_client):
    # With Python's backtracking `re`, ^(a+)+$ against "a"*40 + "!" takes hours.
    template = AgendaTemplateFactory(
        customer=customer,
        agenda=OPERATIONS,
        payload_schema={
            "type": "object",
            "properties": {"url": {"type": "string", "pattern": "^(a+)+$"}},
            "patternProperties": {"^(a|aa)+$": {"type": "string"}},
        },
    )
    hostile = "a" * 40 + "!"

    started = time.monotonic()
    found = payload_errors(template.payload_schema, {"url": hostile, hostile: "x"})
    elapsed = time.monotonic() - started
    response = submitter_client.post(
        f"/api/v1/agenda-templates/{template.pk}/preview/",
        {"payload": {"url": hostile}},
        format="json",
    )

    assert elapsed < 0.1
    assert list(found) == ["payload.url"]
    assert response.status_code == 400
    assert list(response.json()) == ["payload.url"]


def test_a_payload_check_that_fans_out_is_bounded_in_time():
    # Every level tries both branches on every item, and both fail at the end: 6^9 checks,
    # minutes of work for a 2 KB schema and a small payload, were it not for the deadline.
    defs: dict = {"l0": {"type": "string"}}
    for level in range(1, 10):
        below = {"items": {"$ref": f"#/$defs/l{level - 1}"}}
        defs[f"l{level}"] = {
            "anyOf": [
                {**below, "contains": {"const": "never"}},
                {**below, "maxItems": 1},
            ]
        }
    schema = {"$defs": defs, "$ref": "#/$defs/l9"}
    assert payload_schema_errors(schema) == []
    payload: object = "x"
    for _ in range(9):
        payload = [payload] * 3

    started = time.monotonic()
    found = payload_errors(schema, payload)

    assert time.monotonic() - started < 3
    assert found == {"payload": ["Checking the payload took over 1 s; simplify it."]}
