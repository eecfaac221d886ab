"""Property-based fuzzing of every write a customer can make, in every role: no input is a
5xx, and no answer ever carries a marker planted in a local file or served by a local
listener (nothing the server fetched or read on the caller's behalf).

Bodies are built from each endpoint's own field names with values drawn from any JSON, the
planted references (file URI, listener URL, `$ref` to both), limits' edges and hostile text.
"""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agendas.models import AgendaProgress
from resourcepools.models import Membership
from scheduling.fill import insight_fill
from scheduling.pull import insight_pull
from tests.factories import AgendaTemplateFactory
from tests.security.listener import marker_listener

pytestmark = pytest.mark.django_db

MARKER = "planted-marker-5c1e9"
FUZZ = settings(
    max_examples=int(os.environ.get("POP_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=not os.environ.get("POP_FUZZ_EXAMPLES"),
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A file and an HTTP listener that both hold MARKER; the listener counts requests."""
    secret = tmp_path_factory.mktemp("planted") / "secret.json"
    secret.write_text(json.dumps({"type": "string", "const": MARKER, "note": MARKER}))
    with marker_listener(MARKER) as (url, hits):
        yield {"file": secret.as_uri(), "path": str(secret), "url": url, "hits": hits}


def hostile_text(planted) -> st.SearchStrategy:
    return st.one_of(
        st.text(max_size=30),
        st.sampled_from(
            [
                planted["file"],
                planted["path"],
                f"{planted['url']}/x.json",
                f"http://127.0.0.1:1\\@{planted['url'][7:]}/",
                "\x00",
                "\ud800",
                "@<pop.payload>",
                "@<pop.payload::/../../etc/passwd>",
                "@<" + "a" * 300 + ">",
                "x" * 300,
                "9999-12-31T23:59:59Z",
                "0001-01-01T00:00:00-05:00",
                "^(a+)+$",
                "mediainfo",
                "",
            ]
        ),
    )


def json_values(planted) -> st.SearchStrategy:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False),
        hostile_text(planted),
    )
    refs = st.sampled_from(
        [
            {"$ref": planted["file"]},
            {"$ref": f"{planted['url']}/s.json"},
            {"$ref": "#"},
            {"$ref": "#/$defs/nope"},
            {"type": "string", "pattern": "^(a+)+$"},
        ]
    )
    return st.recursive(
        st.one_of(scalars, refs),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(hostile_text(planted), inner, max_size=4),
        ),
        max_leaves=12,
    )


def bodies(planted, fields: list[str]) -> st.SearchStrategy:
    """Objects with some of `fields`, each any JSON value, plus a stray key now and then."""
    value = json_values(planted)
    return st.fixed_dictionaries({}, optional={name: value for name in [*fields, "zz"]})


AGENDA_FIELDS = [
    "operations",
    "customer",
    "params",
    "link_id",
    "external_id",
    "priority",
    "max_attempts",
    "retry_delay_seconds",
    "callback_url",
    "run_after",
    "do_not_run",
    "default_insight",
    "idempotency_key",
]
OPERATION_FIELDS = ["name", "type", "payload", "params", "depends_on", "timeout_seconds"]


def agenda_bodies(planted) -> st.SearchStrategy:
    operation = bodies(planted, OPERATION_FIELDS)
    good_operation = st.just({"name": "probe", "type": "mediainfo", "payload": {"url": "s3://a"}})
    return st.builds(
        lambda body, operations: {**body, "operations": operations},
        bodies(planted, AGENDA_FIELDS),
        st.one_of(json_values(planted), st.lists(st.one_of(operation, good_operation), max_size=3)),
    )


@pytest.fixture
def callers(customer, insight, make_principal, staff_user, api_client_for, worker):
    """One API client per role of customer Acme, plus staff and the pool's worker."""
    clients = {
        role: api_client_for(make_principal(customer, role, username=f"fuzz-{role}"))
        for role in (Membership.Role.ADMIN, Membership.Role.SUBMITTER, Membership.Role.VIEWER)
    }
    clients["staff"] = api_client_for(staff_user)
    clients["worker"] = api_client_for(worker)
    for client in clients.values():
        client.raise_request_exception = False
    return clients


@pytest.fixture
def shared_template(customer):
    return AgendaTemplateFactory(
        customer=customer,
        agenda={
            "operations": [
                {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}}
            ],
            "link_id": "@<pop.payload::/batch>",
        },
        payload_schema={"type": "object", "properties": {"url": {"type": "string"}}},
    )


def send(client, method, url, body, **headers):
    """The body as JSON text with every non-ASCII character escaped (`\\ud800` included), as
    any client can send it."""
    return getattr(client, method)(
        url, json.dumps(body), content_type="application/json", **headers
    )


def assert_safe(response, planted, what):
    assert response.status_code < 500, (what, response.status_code, response.content[:500])
    assert MARKER not in response.content.decode("utf-8", "replace"), what
    assert planted["hits"] == [], what


ROLES = st.sampled_from(["admin", "submitter", "viewer", "staff", "worker"])


def test_submit_and_bulk_submit_never_fail_or_leak(callers, planted):
    @FUZZ
    @given(
        role=ROLES, body=agenda_bodies(planted), items=st.lists(agenda_bodies(planted), max_size=3)
    )
    def check(role, body, items):
        client = callers[role]
        assert_safe(send(client, "post", "/api/v1/agendas/", body), planted, body)
        bulk = {"agendas": items}
        assert_safe(send(client, "post", "/api/v1/agendas/bulk/", bulk), planted, bulk)

    check()


def test_template_save_preview_and_run_never_fail_or_leak(callers, planted, shared_template):
    template_fields = ["name", "description", "agenda", "static_parameters", "payload_schema"]
    run_fields = ["payload", *AGENDA_FIELDS, "version"]

    @FUZZ
    @given(
        role=ROLES,
        template=bodies(planted, template_fields),
        agenda=agenda_bodies(planted),
        run=bodies(planted, run_fields),
    )
    def check(role, template, agenda, run):
        client = callers[role]
        saved = {**template, "agenda": agenda}
        for body in (template, saved):
            assert_safe(send(client, "post", "/api/v1/agenda-templates/", body), planted, body)
            assert_safe(
                send(client, "patch", f"/api/v1/agenda-templates/{shared_template.pk}/", body),
                planted,
                body,
            )
        for action in ("preview", "run"):
            assert_safe(
                send(
                    client, "post", f"/api/v1/agenda-templates/{shared_template.pk}/{action}/", run
                ),
                planted,
                (action, run),
            )

    check()


def test_schedule_save_never_fails_or_leaks(callers, planted, shared_template):
    fields = [
        "name",
        "cron",
        "timezone",
        "start_at",
        "end_at",
        "payload",
        "catch_up",
        "overlap",
        "customer",
        *AGENDA_FIELDS[2:],
    ]

    @FUZZ
    @given(role=ROLES, body=bodies(planted, fields), cron=st.sampled_from(["*/5 * * * *", None]))
    def check(role, body, cron):
        body = {"template": str(shared_template.pk), **body}
        if cron:
            body.setdefault("cron", cron)
        assert_safe(send(callers[role], "post", "/api/v1/schedules/", body), planted, body)

    check()


def test_reports_never_fail_or_leak(callers, planted, submitter, worker, insight, submit_agenda):
    agenda = submit_agenda(submitter)
    insight_fill(insight_id=agenda.insight_id)
    [pulled] = insight_pull(principal=worker.user, insight=insight, count=1, worker="fuzz")
    report_fields = ["state", "message", "percent_complete", "operations", "result", "retryable"]
    operation_fields = ["name", "state", "percent_complete", "result", "message", "params"]
    operation = st.one_of(
        bodies(planted, operation_fields),
        st.builds(
            lambda extra: {"name": "probe", **extra},
            bodies(planted, ["state", "percent_complete", "result", "message"]),
        ),
    )
    report = st.builds(
        lambda body, operations: {**body, "operations": operations},
        bodies(planted, report_fields),
        st.one_of(json_values(planted), st.lists(operation, max_size=3)),
    )

    @FUZZ
    @given(body=report, batch=st.lists(report, max_size=3), lease=st.sampled_from(["ok", "bad"]))
    def check(body, batch, lease):
        pulled.execution.refresh_from_db()
        token = str(pulled.execution.lease_token) if lease == "ok" else "not-a-lease"
        client = callers["worker"]
        assert_safe(
            send(
                client,
                "post",
                f"/api/v1/executions/{pulled.execution.pk}/report/",
                body,
                HTTP_X_POP_LEASE=token,
            ),
            planted,
            body,
        )
        items = [
            {**item, "execution": str(pulled.execution.pk), "lease_token": token} for item in batch
        ]
        assert_safe(
            send(client, "post", "/api/v1/executions/report/", {"reports": items}),
            planted,
            items,
        )

    check()
    # Whatever the fuzzer sent, the agenda is in a state of the machine.
    assert AgendaProgress.objects.get(agenda=agenda).state
