"""The OpenAPI schema: valid without warnings, served offline, and true to the running API.

The schemathesis run drives the live WSGI application with generated requests (valid and
invalid) for every operation and checks that none answers 5xx and that every answer is
documented: its status code, content type and body schema.
"""

import re
import time

import hypothesis
import pytest
import schemathesis
import yaml
from django.core.management import call_command
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from rest_framework.test import APIClient
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.services import token_issue
from core.principals import SYSTEM

pytestmark = pytest.mark.django_db

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Hypothesis examples per operation and generation mode; keeps the run well under 2 minutes.
EXAMPLES = 8
TIME_BUDGET_SECONDS = 110


def test_the_schema_validates_without_warnings(tmp_path):
    target = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))

    schema = yaml.safe_load(target.read_text())
    assert schema["openapi"].startswith("3.")
    assert "/api/v1/agendas/{id}/rerun/" in schema["paths"]


def test_every_operation_documents_its_body_and_errors(tmp_path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    schema = yaml.safe_load(target.read_text())

    undocumented = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            codes = set(operation["responses"])
            success = {code for code in codes if code.startswith("2")}
            if not success or "429" not in codes:
                undocumented.append(f"{method} {path}: {sorted(codes)}")
            if method in ("post", "put", "patch") and not {"400", "413"} <= codes:
                undocumented.append(f"{method} {path}: no 400/413")
            if "{" in path and "404" not in codes:
                undocumented.append(f"{method} {path}: no 404")
            for code in success - {"204"}:
                if "content" not in operation["responses"][code]:
                    undocumented.append(f"{method} {path}: {code} has no body")
    assert undocumented == []


def test_the_filters_are_documented_with_help_text(tmp_path):
    target = tmp_path / "schema.yaml"
    call_command("spectacular", "--file", str(target))
    parameters = yaml.safe_load(target.read_text())["paths"]["/api/v1/agendas/"]["get"][
        "parameters"
    ]

    documented = {p["name"]: p.get("description", "") for p in parameters}
    for name in ("link_id", "cid", "customer", "state", "insight", "template", "external_id"):
        assert documented[name], name
    assert {"created_after", "created_before", "ordering", "limit", "offset"} <= set(documented)


@pytest.mark.parametrize("page", ["/api/v1/docs/", "/api/v1/redoc/"])
def test_the_docs_pages_load_nothing_from_outside_the_server(page):
    response = APIClient().get(page)

    assert response.status_code == 200
    html = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources
    assert [source for source in sources if re.match(r"(https?:)?//", source)] == []
    for source in sources:
        assert APIClient().get(source).status_code == 200, source


def test_the_schema_is_served_as_json():
    response = APIClient().get("/api/v1/schema/", {"format": "json"})

    assert response.status_code == 200
    assert response.json()["info"]["title"].startswith("POP")


@pytest.fixture
def wsgi_app():
    """The real WSGI application, sharing the test's database transaction.

    Like Django's test client, keep Django from closing the connection at the end of each
    request, which would end the test's transaction.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_world(admin_member, submitter, submit_agenda, template, insight):
    """Some rows to collide with; the caller is an admin of Acme (a token in a header)."""
    submit_agenda(submitter, link_id="fuzz")
    key = token_issue(principal=SYSTEM, user=admin_member.user, name="fuzz").key
    return {"Authorization": f"Token {key}"}


def test_schemathesis_finds_no_server_error_and_no_undocumented_answer(wsgi_app, fuzz_world):
    schema = schemathesis.openapi.from_wsgi("/api/v1/schema/?format=json", wsgi_app)
    deadline = time.monotonic() + TIME_BUDGET_SECONDS
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 60

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            if time.monotonic() > deadline:
                pytest.fail(f"schemathesis run exceeded {TIME_BUDGET_SECONDS}s")

            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                suppress_health_check=list(hypothesis.HealthCheck),
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            )
            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            def run(case):
                response = case.call(headers=fuzz_world)
                case.validate_response(response, checks=CHECKS, headers=fuzz_world)

            try:
                run()
            except (Exception, BaseExceptionGroup) as error:  # report every operation's failure
                failures.append(f"{operation.label} [{mode.value}]: {str(error)[:1500]}")

    assert failures == [], "\n\n".join(failures)
