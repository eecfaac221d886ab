"""PopClient against httpx.MockTransport: headers, typed errors, retries, pagination."""

import json

import httpx
import pytest

from popclient.client import PopClient
from popclient.errors import (
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    PopError,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    ValidationFailed,
)


class FakeServer:
    """Records requests; answers from a list of (status, body) or a function."""

    def __init__(self, *answers, respond=None):
        self.answers = list(answers)
        self.respond = respond
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        if self.respond is not None:
            return self.respond(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        return httpx.Response(status, json=body, headers={"X-POP-CID": "cid-from-server"})

    def client(self, **kwargs):
        kwargs.setdefault("retries", 3)
        return PopClient(
            "http://pop.test/",
            "secret-token",
            transport=httpx.MockTransport(self),
            sleep=lambda seconds: None,
            **kwargs,
        )

    def body(self, index=-1):
        return json.loads(self.requests[index].content or b"null")


def test_token_and_cid_headers_are_sent_and_server_cid_is_kept():
    server = FakeServer((200, {"id": "a1", "state": "ready"}))
    client = server.client(cid="my-correlation-id")

    agenda = client.get_agenda("a1")

    request = server.requests[0]
    assert agenda == {"id": "a1", "state": "ready"}
    assert request.method == "GET"
    assert request.url == "http://pop.test/api/v1/agendas/a1/"
    assert request.headers["Authorization"] == "Token secret-token"
    assert request.headers["X-POP-CID"] == "my-correlation-id"
    assert client.last_cid == "cid-from-server"


def test_base_url_may_include_the_api_prefix():
    server = FakeServer((200, {"count": 0, "next": None, "previous": None, "results": []}))

    PopClient("http://pop.test/api/v1/", "t", transport=httpx.MockTransport(server)).queues()

    assert str(server.requests[0].url) == "http://pop.test/api/v1/queues/"


def test_no_cid_header_unless_one_is_given():
    server = FakeServer((200, {}))

    server.client().get_template("t1")
    server.client().report("e1", "lease", cid="agenda-cid")

    assert "X-POP-CID" not in server.requests[0].headers
    assert server.requests[1].headers["X-POP-CID"] == "agenda-cid"


def test_validation_error_carries_field_errors():
    errors = {"operations.1.depends_on": ["Unknown operation: ghost"], "priority": ["Max 9."]}
    server = FakeServer((400, errors))

    with pytest.raises(ValidationFailed) as caught:
        server.client().submit_agenda({"operations": []})

    assert caught.value.errors == errors
    assert caught.value.status_code == 400
    assert caught.value.cid == "cid-from-server"
    assert "Unknown operation: ghost" in str(caught.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (413, PayloadTooLarge),
        (418, PopError),
    ],
)
def test_statuses_map_to_typed_errors(status, error_type):
    server = FakeServer((status, {"detail": f"status {status}"}))

    with pytest.raises(error_type) as caught:
        server.client().abort_agenda("a1")

    assert caught.value.message == f"status {status}"
    assert caught.value.status_code == status


def test_conflict_message_names_the_state():
    server = FakeServer((409, {"detail": "agenda a1 is succeeded; cannot become aborted"}))

    with pytest.raises(Conflict, match="is succeeded"):
        server.client().abort_agenda("a1")


def test_get_is_retried_on_5xx_then_succeeds():
    server = FakeServer((503, {"detail": "busy"}), (500, {}), (200, {"results": []}))

    assert server.client().list_agendas(state="ready") == {"results": []}
    assert len(server.requests) == 3
    assert server.requests[0].url.params["state"] == "ready"


def test_get_gives_up_after_the_configured_retries():
    server = FakeServer((502, {"detail": "bad gateway"}))

    with pytest.raises(ServerError):
        server.client(retries=2).get_agenda("a1")

    assert len(server.requests) == 3


def test_pull_is_not_retried_on_5xx():
    server = FakeServer((500, {"detail": "boom"}), (200, {"agendas": []}))

    with pytest.raises(ServerError):
        server.client().pull("insight-1", count=5, worker="w1", wait_seconds=2)

    assert len(server.requests) == 1


def test_pull_is_not_retried_when_the_answer_was_lost():
    server = FakeServer(httpx.ReadTimeout("slow"), (200, {"agendas": []}))

    with pytest.raises(TransportError):
        server.client().pull("insight-1")

    assert len(server.requests) == 1


def test_pull_is_retried_when_the_connection_was_never_made():
    item = {"agenda": {"id": "a1"}, "progress": {}, "execution": {"id": "e1"}}
    server = FakeServer(httpx.ConnectError("refused"), (200, {"agendas": [item]}))

    items = server.client().pull("insight-1", count=2, worker="w1", wait_seconds=5)

    assert items == [item]
    assert len(server.requests) == 2
    assert server.requests[-1].url.path == "/api/v1/insights/insight-1/pull/"
    assert server.body() == {"count": 2, "worker": "w1", "wait_seconds": 5}


def test_post_actions_are_not_retried_on_5xx():
    server = FakeServer((500, {}), (200, {}))

    with pytest.raises(ServerError):
        server.client().pause_agenda("a1")

    assert len(server.requests) == 1


def test_submit_with_idempotency_key_is_retried_on_5xx():
    server = FakeServer((503, {}), (201, {"id": "a1"}))

    agenda = server.client().submit_agenda({"operations": []}, idempotency_key="k-1")

    assert agenda == {"id": "a1"}
    assert [r.headers["Idempotency-Key"] for r in server.requests] == ["k-1", "k-1"]


def test_report_sends_lease_header_and_sparse_body_and_is_retried():
    answer = {"abort": False, "pause": True, "lease_expires_at": "2030-01-01T00:00:00Z"}
    server = FakeServer((503, {}), (200, answer))

    result = server.client().report(
        "e1", "lease-1", percent_complete=50.0, operations=[{"name": "a", "state": "executing"}]
    )

    assert result == answer
    request = server.requests[-1]
    assert request.url.path == "/api/v1/executions/e1/report/"
    assert request.headers["X-POP-Lease"] == "lease-1"
    assert server.body() == {
        "percent_complete": 50.0,
        "operations": [{"name": "a", "state": "executing"}],
    }
    assert len(server.requests) == 2


def test_stale_report_raises_conflict_without_retry():
    server = FakeServer((409, {"detail": "execution is no longer current"}))

    with pytest.raises(Conflict):
        server.client().report("e1", "lease-1", state="succeeded")

    assert len(server.requests) == 1


def test_report_batch_and_add_operations():
    server = FakeServer((200, {"results": [{"ok": True, "abort": False, "pause": False}]}))
    client = server.client()

    results = client.report_batch([{"execution": "e1", "lease_token": "t", "percent_complete": 5}])
    client.add_operations("e1", "t", [{"name": "gen", "type": "log"}])

    assert results == [{"ok": True, "abort": False, "pause": False}]
    assert server.requests[0].url.path == "/api/v1/executions/report/"
    assert server.body(0) == {
        "reports": [{"execution": "e1", "lease_token": "t", "percent_complete": 5}]
    }
    assert server.requests[1].url.path == "/api/v1/executions/e1/operations/"
    assert server.requests[1].headers["X-POP-Lease"] == "t"
    assert server.body(1) == {"operations": [{"name": "gen", "type": "log"}]}


def test_rate_limit_is_retried_after_the_servers_delay():
    sleeps = []

    def respond(request):
        if len(server.requests) == 1:
            return httpx.Response(429, json={"detail": "slow down"}, headers={"Retry-After": "2"})
        return httpx.Response(201, json={"id": "a1"})

    server = FakeServer(respond=respond)
    client = PopClient(
        "http://pop.test", "t", transport=httpx.MockTransport(server), sleep=sleeps.append
    )

    assert client.submit_agenda({"operations": []}) == {"id": "a1"}
    assert sleeps == [2.0]


def test_rate_limit_error_when_retries_are_exhausted():
    server = FakeServer((429, {"detail": "slow down"}))

    with pytest.raises(RateLimited):
        server.client(retries=0).queues()


def test_paginate_follows_next_links():
    def respond(request):
        offset = int(request.url.params.get("offset", 0))
        nxt = f"http://pop.test/api/v1/agendas/?limit=2&offset={offset + 2}" if offset < 2 else None
        results = [{"id": f"a{offset + i}"} for i in range(2)]
        return httpx.Response(
            200, json={"count": 4, "next": nxt, "previous": None, "results": results}
        )

    server = FakeServer(respond=respond)

    ids = [agenda["id"] for agenda in server.client().iter_agendas(limit=2)]

    assert ids == ["a0", "a1", "a2", "a3"]
    assert all(r.headers["Authorization"] == "Token secret-token" for r in server.requests)


def test_obtain_token_posts_credentials_without_authorization():
    server = FakeServer((200, {"token": "new-token"}))
    client = PopClient("http://pop.test", transport=httpx.MockTransport(server))

    assert client.obtain_token("alice", "pw") == "new-token"
    assert client.token == "new-token"
    assert server.requests[0].url.path == "/api/v1/auth/token/"
    assert "Authorization" not in server.requests[0].headers
    assert server.body() == {"username": "alice", "password": "pw"}


def test_endpoint_paths_and_bodies():
    server = FakeServer((200, {"ok": True}))
    client = server.client()
    calls = [
        (lambda: client.submit_agendas_bulk([{"operations": []}]), "POST", "/agendas/bulk/"),
        (lambda: client.resume_agenda("a"), "POST", "/agendas/a/resume/"),
        (lambda: client.rerun_agenda("a", mode="reset_all"), "POST", "/agendas/a/rerun/"),
        (lambda: client.list_executions("a"), "GET", "/agendas/a/executions/"),
        (lambda: client.list_templates(), "GET", "/agenda-templates/"),
        (
            lambda: client.run_template("t", {"v": 1}, link_id="L"),
            "POST",
            "/agenda-templates/t/run/",
        ),
        (lambda: client.preview_template("t", {"v": 1}), "POST", "/agenda-templates/t/preview/"),
        (lambda: client.list_schedules(), "GET", "/schedules/"),
        (lambda: client.create_schedule(name="n", cron="* * * * *"), "POST", "/schedules/"),
        (lambda: client.pause_schedule("s"), "POST", "/schedules/s/pause/"),
        (lambda: client.resume_schedule("s"), "POST", "/schedules/s/resume/"),
        (lambda: client.trigger_schedule("s"), "POST", "/schedules/s/trigger/"),
        (lambda: client.schedule_runs("s"), "GET", "/schedules/s/runs/"),
        (lambda: client.progress_summary("L"), "GET", "/progress-summary/"),
    ]
    for call, method, path in calls:
        call()
        assert (server.requests[-1].method, server.requests[-1].url.path) == (
            method,
            "/api/v1" + path,
        )

    assert server.body(0) == {"agendas": [{"operations": []}]}
    assert server.body(2) == {"mode": "reset_all"}
    assert server.body(5) == {"link_id": "L", "payload": {"v": 1}}
    assert server.requests[-1].url.params["link_id"] == "L"


def test_a_pull_with_a_request_id_is_asked_again_after_a_lost_answer():
    answers = iter([httpx.ReadError("connection reset"), None])
    bodies = []

    def transport(request):
        bodies.append(json.loads(request.content))
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return httpx.Response(200, json={"agendas": [{"execution": {"id": "e1"}}]})

    client = PopClient(
        "http://pop.test", "t", transport=httpx.MockTransport(transport), sleep=lambda s: None
    )

    items = client.pull("i1", count=1, worker="w", request_id="r-7")

    assert items == [{"execution": {"id": "e1"}}]
    assert [body["request_id"] for body in bodies] == ["r-7", "r-7"]


def test_a_pull_without_a_request_id_is_never_sent_twice():
    calls = []

    def transport(request):
        calls.append(request)
        raise httpx.ReadError("connection reset after the request was sent")

    client = PopClient(
        "http://pop.test", "t", transport=httpx.MockTransport(transport), sleep=lambda s: None
    )

    with pytest.raises(PopError):
        client.pull("i1", count=1, worker="w")

    assert len(calls) == 1
