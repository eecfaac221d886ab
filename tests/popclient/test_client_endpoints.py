"""One PopClient method per REST endpoint: method, path, body, answer and errors of each.

`ENDPOINTS` drives the request checks; with Django configured (the whole suite) it is also
compared with the server's routes, so a route without a client method fails here.
"""

import json
import re

import httpx
import pytest

from popclient.client import PopClient
from popclient.errors import Conflict, Forbidden, NotFound, ServerError, ValidationFailed

ID = "ID"  # every id below; replaced by {} to compare with the server's route patterns


class FakeServer:
    """Records requests; answers every one with `status` and `body` (no body for 204)."""

    def __init__(self, status=200, body=None, *, statuses=None):
        self.status = status
        self.body = {"token": "k", "username": "u"} if body is None and status != 204 else body
        self.statuses = list(statuses or [])
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else self.status
        if status == 204:
            return httpx.Response(204, headers={"X-POP-CID": "cid-from-server"})
        body = self.body if status < 400 else {"detail": f"status {status}"}
        return httpx.Response(status, json=body, headers={"X-POP-CID": "cid-from-server"})

    def client(self, **kwargs):
        kwargs.setdefault("retries", 3)
        return PopClient(
            "http://pop.test",
            "secret-token",
            transport=httpx.MockTransport(self),
            sleep=lambda seconds: None,
            **kwargs,
        )

    @property
    def last(self):
        return self.requests[-1]

    def last_body(self):
        return json.loads(self.last.content) if self.last.content else None


# (call, HTTP method, path under /api/v1/, JSON body sent or None for no body, query params)
ENDPOINTS = [
    # authentication
    (
        lambda c: c.obtain_token("u", "p"),
        "POST",
        "auth/token/",
        {"username": "u", "password": "p"},
        {},
    ),
    # customers
    (lambda c: c.list_customers(slug="acme"), "GET", "customers/", None, {"slug": "acme"}),
    (lambda c: c.get_customer(ID), "GET", "customers/ID/", None, {}),
    (
        lambda c: c.create_customer(name="Acme", slug="acme", resource_pool=None),
        "POST",
        "customers/",
        {"name": "Acme", "slug": "acme"},
        {},
    ),
    (
        lambda c: c.update_customer(ID, callback_url="https://h.example/cb"),
        "PATCH",
        "customers/ID/",
        {"callback_url": "https://h.example/cb"},
        {},
    ),
    (lambda c: c.delete_customer(ID), "DELETE", "customers/ID/", None, {}),
    # members and tokens
    (
        lambda c: c.list_members(ID, role="admin"),
        "GET",
        "customers/ID/members/",
        None,
        {"role": "admin"},
    ),
    (lambda c: c.get_member(ID, ID), "GET", "customers/ID/members/ID/", None, {}),
    (
        lambda c: c.add_member(ID, "bob", "viewer"),
        "POST",
        "customers/ID/members/",
        {"username": "bob", "role": "viewer"},
        {},
    ),
    (
        lambda c: c.add_member(ID, "eve", "admin", email="e@x.org", password="pw123456"),
        "POST",
        "customers/ID/members/",
        {"username": "eve", "role": "admin", "email": "e@x.org", "password": "pw123456"},
        {},
    ),
    (
        lambda c: c.update_member(ID, ID, role="submitter"),
        "PATCH",
        "customers/ID/members/ID/",
        {"role": "submitter"},
        {},
    ),
    (lambda c: c.remove_member(ID, ID), "DELETE", "customers/ID/members/ID/", None, {}),
    (lambda c: c.issue_token(ID, ID), "POST", "customers/ID/members/ID/token/", {}, {}),
    (lambda c: c.revoke_token(ID, ID), "DELETE", "customers/ID/members/ID/token/", None, {}),
    (
        lambda c: c.issue_token(ID, ID, name="worker-a", never_expires=True),
        "POST",
        "customers/ID/members/ID/token/",
        {"name": "worker-a", "expires_in_days": None},
        {},
    ),
    (lambda c: c.list_member_tokens(ID, ID), "GET", "customers/ID/members/ID/tokens/", None, {}),
    (
        lambda c: c.revoke_member_token(ID, ID, ID),
        "DELETE",
        "customers/ID/members/ID/tokens/ID/",
        None,
        {},
    ),
    # your own API tokens
    (lambda c: c.list_tokens(name="laptop"), "GET", "tokens/", None, {"name": "laptop"}),
    (lambda c: c.get_token(ID), "GET", "tokens/ID/", None, {}),
    (lambda c: c.create_token("laptop"), "POST", "tokens/", {"name": "laptop"}, {}),
    (
        lambda c: c.create_token("ci", expires_in_days=7),
        "POST",
        "tokens/",
        {"name": "ci", "expires_in_days": 7},
        {},
    ),
    (lambda c: c.delete_token(ID), "DELETE", "tokens/ID/", None, {}),
    # resource pools and insights
    (
        lambda c: c.list_resource_pools(owner="farm"),
        "GET",
        "resource-pools/",
        None,
        {"owner": "farm"},
    ),
    (lambda c: c.get_resource_pool(ID), "GET", "resource-pools/ID/", None, {}),
    (
        lambda c: c.create_resource_pool(name="p", owner="farm"),
        "POST",
        "resource-pools/",
        {"name": "p", "owner": "farm"},
        {},
    ),
    (
        lambda c: c.update_resource_pool(ID, description=None),
        "PATCH",
        "resource-pools/ID/",
        {"description": None},
        {},
    ),
    (lambda c: c.delete_resource_pool(ID), "DELETE", "resource-pools/ID/", None, {}),
    (lambda c: c.list_insights(resource_pool=ID), "GET", "insights/", None, {"resource_pool": ID}),
    (lambda c: c.get_insight(ID), "GET", "insights/ID/", None, {}),
    (
        lambda c: c.create_insight(
            resource_pool="p", name="gpu", mappers={"operation_type": ["log"]}
        ),
        "POST",
        "insights/",
        {"resource_pool": "p", "name": "gpu", "mappers": {"operation_type": ["log"]}},
        {},
    ),
    (lambda c: c.update_insight(ID, queue_size=5), "PATCH", "insights/ID/", {"queue_size": 5}, {}),
    (lambda c: c.delete_insight(ID), "DELETE", "insights/ID/", None, {}),
    (
        lambda c: c.pull(ID, count=2, worker="w", wait_seconds=0),
        "POST",
        "insights/ID/pull/",
        {"count": 2, "worker": "w", "wait_seconds": 0},
        {},
    ),
    # templates
    (lambda c: c.list_templates(name="t"), "GET", "agenda-templates/", None, {"name": "t"}),
    (lambda c: c.get_template(ID), "GET", "agenda-templates/ID/", None, {}),
    (
        lambda c: c.create_template(name="t", agenda={"operations": []}),
        "POST",
        "agenda-templates/",
        {"name": "t", "agenda": {"operations": []}},
        {},
    ),
    (
        lambda c: c.update_template(ID, description="d"),
        "PATCH",
        "agenda-templates/ID/",
        {"description": "d"},
        {},
    ),
    (lambda c: c.delete_template(ID), "DELETE", "agenda-templates/ID/", None, {}),
    (
        lambda c: c.run_template(ID, {"who": "x"}),
        "POST",
        "agenda-templates/ID/run/",
        {"payload": {"who": "x"}},
        {},
    ),
    (
        lambda c: c.preview_template(ID, {"who": "x"}),
        "POST",
        "agenda-templates/ID/preview/",
        {"payload": {"who": "x"}},
        {},
    ),
    (lambda c: c.list_template_versions(ID), "GET", "agenda-templates/ID/versions/", None, {}),
    (lambda c: c.get_template_version(ID, 3), "GET", "agenda-templates/ID/versions/3/", None, {}),
    (
        lambda c: c.diff_template_versions(ID, 1, 2),
        "GET",
        "agenda-templates/ID/versions/diff/",
        None,
        {"from": "1", "to": "2"},
    ),
    # agendas and progress
    (lambda c: c.list_agendas(state="ready"), "GET", "agendas/", None, {"state": "ready"}),
    (lambda c: c.submit_agenda({"operations": []}), "POST", "agendas/", {"operations": []}, {}),
    (
        lambda c: c.submit_agendas_bulk([{"operations": []}]),
        "POST",
        "agendas/bulk/",
        {"agendas": [{"operations": []}]},
        {},
    ),
    (lambda c: c.get_agenda(ID), "GET", "agendas/ID/", None, {}),
    (lambda c: c.abort_agenda(ID), "POST", "agendas/ID/abort/", {}, {}),
    (
        lambda c: c.act_on_agendas("abort", filter={"label": ["batch:42"]}, dry_run=True),
        "POST",
        "agendas/actions/",
        {"action": "abort", "filter": {"label": ["batch:42"]}, "dry_run": True},
        {},
    ),
    (lambda c: c.get_agenda_action(ID), "GET", "agendas/actions/ID/", None, {}),
    (lambda c: c.list_agenda_actions(), "GET", "agendas/actions/", None, {}),
    (lambda c: c.pause_agenda(ID), "POST", "agendas/ID/pause/", {}, {}),
    (lambda c: c.pause_agenda(ID, now=True), "POST", "agendas/ID/pause/", {"mode": "now"}, {}),
    (lambda c: c.resume_agenda(ID), "POST", "agendas/ID/resume/", {}, {}),
    (lambda c: c.rerun_agenda(ID), "POST", "agendas/ID/rerun/", {"mode": "continue"}, {}),
    (lambda c: c.list_executions(ID), "GET", "agendas/ID/executions/", None, {}),
    (
        lambda c: c.list_agenda_progress(link_id="L"),
        "GET",
        "agenda-progress/",
        None,
        {"link_id": "L"},
    ),
    (lambda c: c.get_agenda_progress(ID), "GET", "agenda-progress/ID/", None, {}),
    (
        lambda c: c.list_operation_progress(state="failed"),
        "GET",
        "operation-progress/",
        None,
        {"state": "failed"},
    ),
    (lambda c: c.get_operation_progress(ID), "GET", "operation-progress/ID/", None, {}),
    (lambda c: c.progress_summary("L"), "GET", "progress-summary/", None, {"link_id": "L"}),
    # pullers
    (
        lambda c: c.report(ID, "lease", percent_complete=5),
        "POST",
        "executions/ID/report/",
        {"percent_complete": 5},
        {},
    ),
    (
        lambda c: c.report_batch([{"execution": ID, "lease_token": "t"}]),
        "POST",
        "executions/report/",
        {"reports": [{"execution": ID, "lease_token": "t"}]},
        {},
    ),
    (
        lambda c: c.add_operations(ID, "lease", [{"name": "g", "type": "log"}]),
        "POST",
        "executions/ID/operations/",
        {"operations": [{"name": "g", "type": "log"}]},
        {},
    ),
    # schedules
    (lambda c: c.list_schedules(template=ID), "GET", "schedules/", None, {"template": ID}),
    (
        lambda c: c.create_schedule(name="n", cron="* * * * *"),
        "POST",
        "schedules/",
        {"name": "n", "cron": "* * * * *"},
        {},
    ),
    (lambda c: c.get_schedule(ID), "GET", "schedules/ID/", None, {}),
    (
        lambda c: c.update_schedule(ID, cron="0 * * * *", payload={"who": "y"}),
        "PATCH",
        "schedules/ID/",
        {"cron": "0 * * * *", "payload": {"who": "y"}},
        {},
    ),
    (lambda c: c.delete_schedule(ID), "DELETE", "schedules/ID/", None, {}),
    (lambda c: c.pause_schedule(ID), "POST", "schedules/ID/pause/", {}, {}),
    (lambda c: c.resume_schedule(ID), "POST", "schedules/ID/resume/", {}, {}),
    (lambda c: c.trigger_schedule(ID), "POST", "schedules/ID/trigger/", {}, {}),
    (lambda c: c.schedule_runs(ID, limit=5), "GET", "schedules/ID/runs/", None, {"limit": "5"}),
    # triggers
    (lambda c: c.list_triggers(limit=5), "GET", "triggers/", None, {"limit": "5"}),
    (lambda c: c.get_trigger(ID), "GET", "triggers/ID/", None, {}),
    (
        lambda c: c.create_trigger(name="n", template=ID),
        "POST",
        "triggers/",
        {"name": "n", "template": ID},
        {},
    ),
    (
        lambda c: c.update_trigger(ID, enabled=False),
        "PATCH",
        "triggers/ID/",
        {"enabled": False},
        {},
    ),
    (lambda c: c.delete_trigger(ID), "DELETE", "triggers/ID/", None, {}),
    (lambda c: c.rotate_trigger_secret(ID), "POST", "triggers/ID/rotate-secret/", {}, {}),
    (lambda c: c.trigger_firings(ID), "GET", "triggers/ID/firings/", None, {}),
    (
        lambda c: c.fire_trigger(ID, "s3cret", {"path": "/in/a.mxf"}),
        "POST",
        "triggers/ID/fire/",
        {"path": "/in/a.mxf"},
        {},
    ),
    # callbacks, queues, alerts
    (
        lambda c: c.list_callback_deliveries(status="failed"),
        "GET",
        "callback-deliveries/",
        None,
        {"status": "failed"},
    ),
    (lambda c: c.get_callback_delivery(ID), "GET", "callback-deliveries/ID/", None, {}),
    (lambda c: c.redeliver_callback(ID), "POST", "callback-deliveries/ID/redeliver/", {}, {}),
    (lambda c: c.queues(), "GET", "queues/", None, {}),
    (lambda c: c.get_queue(ID), "GET", "queues/ID/", None, {}),
    (lambda c: c.list_alerts(state="open"), "GET", "alerts/", None, {"state": "open"}),
    (lambda c: c.get_alert(ID), "GET", "alerts/ID/", None, {}),
    # audit trail
    (
        lambda c: c.list_audit_events(action="agenda.abort"),
        "GET",
        "audit-events/",
        None,
        {"action": "agenda.abort"},
    ),
    (lambda c: c.get_audit_event(ID), "GET", "audit-events/ID/", None, {}),
]


@pytest.mark.parametrize(
    ("call", "method", "path", "body", "params"),
    ENDPOINTS,
    ids=[f"{method} {path}" for _, method, path, _, _ in ENDPOINTS],
)
def test_each_method_sends_its_request(call, method, path, body, params):
    server = FakeServer()

    call(server.client())

    assert len(server.requests) == 1
    request = server.last
    assert request.method == method
    assert request.url.path == f"/api/v1/{path}"
    assert dict(request.url.params) == params
    assert server.last_body() == body
    if path == "triggers/ID/fire/":  # signed with the trigger's secret instead
        assert "Authorization" not in request.headers
        assert request.headers["X-POP-Signature"].startswith("sha256=")
    elif path != "auth/token/":
        assert request.headers["Authorization"] == "Token secret-token"


def _route_template(path):
    return re.sub(r"(^|/)(ID|[0-9]+)(?=/)", r"\1{}", path)


def test_every_server_route_has_a_client_method():
    django = pytest.importorskip("django")
    from django.conf import settings

    if not settings.configured:
        pytest.skip("the server's routes need Django settings (run inside the whole suite)")
    django.setup()
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns, prefix):
        for entry in patterns:
            text = prefix + str(entry.pattern).lstrip("^").rstrip("$")
            if isinstance(entry, URLResolver):
                yield from walk(entry.url_patterns, text)
            elif isinstance(entry, URLPattern) and text.startswith("api/v1/"):
                actions = getattr(entry.callback, "actions", None)
                view = getattr(entry.callback, "view_class", None)
                if actions:
                    methods = set(actions)
                elif view is not None:
                    methods = {
                        m for m in ("get", "post", "put", "patch", "delete") if hasattr(view, m)
                    }
                else:
                    continue
                route = re.sub(r"\(\?P<\w+>[^)]*\)|<[^>]+>", "{}", text[len("api/v1/") :])
                # PUT: update_* send PATCH (same handler). HEAD: DRF adds it to a viewset's
                # actions once a GET has been served in this process, so it depends on order.
                for method in methods - {"put", "head", "options"}:
                    yield method.upper(), route

    # Not endpoints of the API: its root listing, the catch-all 404 and the schema pages.
    skip = {"", "schema/", "docs/", "redoc/"}
    routes = {
        (method, route)
        for method, route in walk(get_resolver().url_patterns, "")
        if route not in skip and not route.startswith("(?!")
    }
    covered = {(method, _route_template(path)) for _, method, path, _, _ in ENDPOINTS}

    assert routes - covered == set(), "server routes without a PopClient method"
    assert covered - routes == set(), "client methods without a server route"


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(400, ValidationFailed), (403, Forbidden), (404, NotFound), (409, Conflict)],
)
@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.add_member("cust", "bob", "viewer"),
        lambda c: c.update_member("cust", 7, role="admin"),
        lambda c: c.remove_member("cust", 7),
        lambda c: c.issue_token("cust", 7),
        lambda c: c.create_resource_pool(name="p", owner="farm"),
        lambda c: c.update_insight("i", queue_size=0),
        lambda c: c.delete_template("t"),
        lambda c: c.update_schedule("s", cron="bad"),
        lambda c: c.redeliver_callback(3),
        lambda c: c.get_alert("a"),
    ],
    ids=[
        "add_member",
        "update_member",
        "remove_member",
        "issue_token",
        "create_resource_pool",
        "update_insight",
        "delete_template",
        "update_schedule",
        "redeliver_callback",
        "get_alert",
    ],
)
def test_errors_of_new_methods_are_typed(call, status, error_type):
    server = FakeServer(status)

    with pytest.raises(error_type) as caught:
        call(server.client())

    assert caught.value.status_code == status
    assert caught.value.cid == "cid-from-server"
    assert caught.value.message == f"status {status}"
    assert len(server.requests) == 1


def test_field_errors_of_an_update_reach_the_caller():
    errors = {"cron": ["Not a valid cron expression."]}

    def respond(request):
        return httpx.Response(400, json=errors)

    client = PopClient("http://pop.test", "t", transport=httpx.MockTransport(respond))

    with pytest.raises(ValidationFailed) as caught:
        client.update_schedule("s", cron="every minute")

    assert caught.value.errors == errors


def test_deletes_return_none_on_204():
    server = FakeServer(204)
    client = server.client()

    assert client.delete_schedule("s") is None
    assert client.remove_member("c", 3) is None
    assert client.delete_resource_pool("p") is None
    assert [r.method for r in server.requests] == ["DELETE"] * 3


def test_answers_are_returned_as_decoded():
    server = FakeServer(201, {"token": "k", "username": "bob"})
    assert server.client().issue_token("c", 3) == {"token": "k", "username": "bob"}

    server = FakeServer(200, {"revoked": 1})
    assert server.client().revoke_token("c", 3) == 1

    page = {"count": 1, "next": None, "previous": None, "results": [{"id": 9, "status": "failed"}]}
    server = FakeServer(200, page)
    assert server.client().list_callback_deliveries(status="failed") == page


def test_delete_is_retried_on_5xx_but_patch_and_token_issue_are_not():
    server = FakeServer(statuses=[503, 204])
    assert server.client().delete_schedule("s") is None
    assert len(server.requests) == 2

    for call in (
        lambda c: c.update_schedule("s", cron="* * * * *"),
        lambda c: c.issue_token("c", 3),
        lambda c: c.redeliver_callback(3),
    ):
        server = FakeServer(statuses=[503, 200])
        with pytest.raises(ServerError):
            call(server.client())
        assert len(server.requests) == 1


def test_a_repeated_delete_answered_404_is_done_but_a_first_404_is_not():
    server = FakeServer(statuses=[503, 404])
    assert server.client().delete_insight("i") is None
    assert [r.method for r in server.requests] == ["DELETE", "DELETE"]

    server = FakeServer(statuses=[404])
    with pytest.raises(NotFound):
        server.client().delete_insight("i")

    server = FakeServer(statuses=[503, 404])
    with pytest.raises(NotFound):  # only DELETE: a repeated GET's 404 is an answer
        server.client().get_insight("i")
