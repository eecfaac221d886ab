"""The worker against an in-process fake of the puller API (docs/design.md §6.3, §6.4)."""

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx

from popclient.client import PopClient
from popclient.handlers import Cancelled, default_registry
from popclient.worker import AgendaRun, Worker

INSIGHT_ID = "6f1c1c2e-0000-4000-8000-000000000001"


class FakePop:
    """Just enough of the server: insights list, pull, report (single and batch)."""

    def __init__(self, *, lease_seconds=3.0):
        self.lock = threading.Lock()
        self.lease_seconds = lease_seconds
        self.queue = []
        self.executions = {}  # id → dict(agenda_id, token, done, reports, abort, pause)
        self.paths = []
        self.abort_after_reports = {}  # agenda id → n reports then answer abort
        self.pause_when_executing = {}  # agenda id → answer pause once this op executes
        self.pause_now = set()  # agenda ids whose pause answers say pause_now
        self.conflict_agendas = set()
        self.fail_reports = 0  # answer 500 to this many reports
        self.fail_insights = 0  # answer 500 to this many insight lists

    # -- helpers for tests --------------------------------------------------------------

    def submit(self, operations, *, progress=None, agenda_id=None):
        agenda_id = agenda_id or str(uuid.uuid4())
        self.queue.append(
            {
                "agenda": {"id": agenda_id, "cid": f"cid-{agenda_id}", "operations": operations},
                "progress": progress or {"state": "queued", "operations": []},
            }
        )
        return agenda_id

    def execution_for(self, agenda_id):
        return next(e for e in self.executions.values() if e["agenda_id"] == agenda_id)

    def reports(self, agenda_id):
        return self.execution_for(agenda_id)["reports"]

    def final(self, agenda_id):
        return self.reports(agenda_id)[-1]

    def op_states(self, agenda_id, name):
        return [
            item["state"]
            for report in self.reports(agenda_id)
            for item in report.get("operations", [])
            if item["name"] == name
        ]

    # -- HTTP ---------------------------------------------------------------------------

    def lease(self):
        expires = datetime.now(UTC) + timedelta(seconds=self.lease_seconds)
        return expires.isoformat().replace("+00:00", "Z")

    def __call__(self, request):
        with self.lock:
            self.paths.append((request.method, request.url.path))
            body = json.loads(request.content) if request.content else {}
            path = request.url.path
            if path == "/api/v1/insights/" and self.fail_insights > 0:
                self.fail_insights -= 1
                return self.json(500, {"detail": "starting up"})
            if path == "/api/v1/insights/":
                insights = [{"id": INSIGHT_ID, "name": "media"}]
                return self.json(200, {"count": 1, "next": None, "results": insights})
            if path == f"/api/v1/insights/{INSIGHT_ID}/pull/":
                return self.json(200, {"agendas": self.pull(body)})
            if path == "/api/v1/executions/report/":
                results = []
                for item in body["reports"]:
                    fields = {
                        k: v for k, v in item.items() if k not in ("execution", "lease_token")
                    }
                    status, answer = self.report(item["execution"], item["lease_token"], fields)
                    if status != 200:
                        answer = {"ok": False, "status": status, "error": answer["detail"]}
                    results.append(answer)
                return self.json(200, {"results": results})
            match = re.fullmatch(r"/api/v1/executions/([^/]+)/report/", path)
            if match:
                status, answer = self.report(
                    match.group(1), request.headers.get("X-POP-Lease"), body
                )
                return self.json(status, answer)
            return self.json(404, {"detail": "not found"})

    @staticmethod
    def json(status, body):
        return httpx.Response(status, json=body)

    def pull(self, body):
        items = []
        while self.queue and len(items) < body["count"]:
            item = self.queue.pop(0)
            execution_id = str(uuid.uuid4())
            token = str(uuid.uuid4())
            self.executions[execution_id] = {
                "agenda_id": item["agenda"]["id"],
                "token": token,
                "worker": body["worker"],
                "done": False,
                "reports": [],
            }
            items.append(
                {
                    **item,
                    "execution": {
                        "id": execution_id,
                        "lease_token": token,
                        "lease_expires_at": self.lease(),
                        "number": 1,
                    },
                }
            )
        return items

    def report(self, execution_id, token, fields):
        execution = self.executions.get(execution_id)
        if execution is None or execution["token"] != token:
            return 409, {"detail": "unknown execution or lease"}
        if execution["done"] or execution["agenda_id"] in self.conflict_agendas:
            return 409, {"detail": "execution is no longer current"}
        if self.fail_reports > 0:
            self.fail_reports -= 1
            return 500, {"detail": "database hiccup"}
        execution["reports"].append({**fields, "_at": time.monotonic()})
        if fields.get("state"):
            execution["done"] = True
        count = len(execution["reports"])
        agenda_id = execution["agenda_id"]
        abort = count >= self.abort_after_reports.get(agenda_id, float("inf"))
        pause_op = self.pause_when_executing.get(agenda_id)
        pause = pause_op is not None and "executing" in self.op_states(agenda_id, pause_op)
        pause_now = pause and agenda_id in self.pause_now
        answer = {"abort": abort, "pause": pause, "pause_now": pause_now}
        return 200, {**answer, "lease_expires_at": self.lease()}


def make_worker(fake, **kwargs):
    client = PopClient(
        "http://pop.test", "worker-token", transport=httpx.MockTransport(fake), retries=2,
        backoff=0.01,
    )  # fmt: skip
    kwargs.setdefault("registry", default_registry(allow_exec=True))
    kwargs.setdefault("wait_seconds", 0)
    kwargs.setdefault("drain_seconds", 10)
    kwargs.setdefault("name", "test-worker")
    return Worker(client, kwargs.pop("insight", INSIGHT_ID), **kwargs)


def run_in_thread(worker):
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("code", worker.run()), daemon=True)
    thread.start()
    return thread, box


def test_worker_runs_an_agenda_whose_later_operations_use_earlier_results():
    fake = FakePop()
    agenda_id = fake.submit(
        [
            {"name": "probe", "type": "echo", "payload": {"width": 640, "hdr": False}},
            {"name": "encode", "type": "echo",
             "payload": {"w": "@<probe.out::/width>", "hdr": "@<probe.out::/hdr>"}},
            {"name": "notify", "type": "echo",
             "payload": {"msg": "encoded at @<encode.out::/w>", "agenda": "@<pop.agendaId>"}},
        ]
    )  # fmt: skip
    worker = make_worker(fake, max_agendas=1, insight="media")

    assert worker.run() == 0

    final = fake.final(agenda_id)
    assert final["state"] == "succeeded"
    assert final["percent_complete"] == 100.0
    results = {
        item["name"]: item["result"]
        for report in fake.reports(agenda_id)
        for item in report.get("operations", [])
        if item["state"] == "succeeded"
    }
    assert results == {
        "probe": {"width": 640, "hdr": False},
        "encode": {"w": 640, "hdr": False},
        "notify": {"msg": "encoded at 640", "agenda": agenda_id},
    }
    assert fake.execution_for(agenda_id)["worker"] == "test-worker"
    assert worker.outcomes == {agenda_id: "succeeded"}


def transitions(states):
    return [state for i, state in enumerate(states) if i == 0 or states[i - 1] != state]


def test_every_operation_state_change_is_reported():
    fake = FakePop()
    agenda_id = fake.submit(
        [
            {"name": "a", "type": "sleep", "payload": {"seconds": 0.2}},
            {"name": "b", "type": "sleep", "payload": {"seconds": 0.2}, "depends_on": ["a"]},
        ]
    )

    make_worker(fake, max_agendas=1).run()

    assert transitions(fake.op_states(agenda_id, "a")) == ["executing", "succeeded"]
    assert transitions(fake.op_states(agenda_id, "b")) == ["executing", "succeeded"]
    assert fake.final(agenda_id)["state"] == "succeeded"


def test_reports_are_sent_at_least_every_third_of_the_lease():
    fake = FakePop(lease_seconds=0.9)
    agenda_id = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 1.5}}])

    make_worker(fake, max_agendas=1, progress_interval=60).run()

    times = [report["_at"] for report in fake.reports(agenda_id)]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert len(times) >= 5
    assert max(gaps) < 0.5  # lease 0.9 s → a report every 0.3 s
    percents = [r["percent_complete"] for r in fake.reports(agenda_id)]
    assert any(0 < p < 100 for p in percents)


def test_abort_flag_cancels_a_running_subprocess_and_reports_aborted(tmp_path):
    fake = FakePop(lease_seconds=0.9)
    script = "import time; time.sleep(60)"
    agenda_id = fake.submit(
        [
            {"name": "job", "type": "exec", "payload": {"argv": ["python3", "-c", script]}},
            {"name": "after", "type": "log", "payload": {"message": "x"}, "depends_on": ["job"]},
        ]
    )
    fake.abort_after_reports[agenda_id] = 2
    started = time.monotonic()

    make_worker(fake, max_agendas=1).run()

    reports = fake.reports(agenda_id)
    final = reports[-1]
    assert final["state"] == "aborted"
    assert final["_at"] - reports[1]["_at"] < 2.0  # within 2 s of the answer carrying the flag
    assert time.monotonic() - started < 4.0
    assert fake.op_states(agenda_id, "job")[-1] == "aborted"
    assert fake.op_states(agenda_id, "after") == []


def test_pause_flag_finishes_running_operations_and_reports_paused():
    fake = FakePop(lease_seconds=0.6)
    agenda_id = fake.submit(
        [
            {"name": "first", "type": "sleep", "payload": {"seconds": 0.5}},
            {"name": "second", "type": "log", "payload": {"message": "x"}, "depends_on": ["first"]},
        ]
    )
    fake.pause_when_executing[agenda_id] = "first"

    make_worker(fake, max_agendas=1).run()

    final = fake.final(agenda_id)
    assert final["state"] == "paused"
    assert final["percent_complete"] == 50.0
    assert fake.op_states(agenda_id, "first")[-1] == "succeeded"
    assert fake.op_states(agenda_id, "second") == []


def test_pause_now_stops_the_running_operation_and_reports_it_waiting():
    fake = FakePop(lease_seconds=0.6)
    agenda_id = fake.submit(
        [
            {"name": "first", "type": "sleep", "payload": {"seconds": 30}},
            {"name": "second", "type": "log", "payload": {"message": "x"}, "depends_on": ["first"]},
        ]
    )
    fake.pause_when_executing[agenda_id] = "first"
    fake.pause_now.add(agenda_id)
    started = time.monotonic()

    make_worker(fake, max_agendas=1).run()

    final = fake.final(agenda_id)
    assert time.monotonic() - started < 5.0  # not the 30 s sleep
    assert final["state"] == "paused"
    assert fake.op_states(agenda_id, "first")[-1] == "waiting"
    assert fake.op_states(agenda_id, "second") == []


def test_retry_resumes_from_prior_progress_without_rerunning_succeeded_operations():
    fake = FakePop()
    prior = {
        "state": "queued",
        "attempts_completed": 1,
        "operations": [
            {"name": "one", "state": "succeeded", "result": {"token": "abc"}},
            {
                "name": "two",
                "state": "failed",
                "params": {"failures": 1},
                "diagnostics": [{"message": "boom"}],
            },
        ],
    }
    agenda_id = fake.submit(
        [
            {"name": "one", "type": "fail", "payload": {}},  # would fail if it ran again
            {"name": "two", "type": "fail", "payload": {"times": 1, "result": "@<one.out>"}},
        ],
        progress=prior,
    )

    make_worker(fake, max_agendas=1).run()

    assert fake.final(agenda_id)["state"] == "succeeded"
    assert fake.op_states(agenda_id, "one") == []  # skipped: never reported again
    two = [
        item
        for report in fake.reports(agenda_id)
        for item in report.get("operations", [])
        if item["name"] == "two" and item["state"] == "succeeded"
    ]
    assert two[0]["result"] == {"token": "abc"}


def test_a_failed_operation_fails_the_agenda_with_diagnostics():
    fake = FakePop()
    agenda_id = fake.submit([{"name": "bad", "type": "fail", "payload": {"message": "no disk"}}])

    make_worker(fake, max_agendas=1).run()

    final = fake.final(agenda_id)
    assert final["state"] == "failed"
    assert final["message"] == "Operation bad failed: no disk"
    assert final["diagnostics"][0]["message"] == "no disk"
    items = [i for r in fake.reports(agenda_id) for i in r.get("operations", [])]
    failed = [i for i in items if i["name"] == "bad" and i["state"] == "failed"][0]
    assert failed["diagnostics"][0]["message"] == "no disk"


def test_conflict_on_report_drops_the_agenda_and_stops_its_handlers():
    fake = FakePop(lease_seconds=0.6)
    agenda_id = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 30}}])
    fake.conflict_agendas.add(agenda_id)
    worker = make_worker(fake, max_agendas=1)
    started = time.monotonic()

    assert worker.run() == 0

    assert time.monotonic() - started < 3.0
    assert worker.outcomes == {agenda_id: "dropped"}
    assert fake.reports(agenda_id) == []


def test_failed_reports_are_retried():
    fake = FakePop()
    fake.fail_reports = 4
    agenda_id = fake.submit([{"name": "a", "type": "log", "payload": {"message": "hi"}}])

    make_worker(fake, max_agendas=1).run()

    assert fake.final(agenda_id)["state"] == "succeeded"
    assert fake.op_states(agenda_id, "a")[-1] == "succeeded"


def test_batch_mode_pulls_several_agendas_and_uses_the_batch_report_endpoint():
    fake = FakePop()
    ids = [
        fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 0.3}}])
        for _ in range(3)
    ]

    worker = make_worker(fake, concurrency=3, batch=3, max_agendas=3)
    worker.run()

    assert [fake.final(agenda_id)["state"] for agenda_id in ids] == ["succeeded"] * 3
    pulls = [p for p in fake.paths if p[1].endswith("/pull/")]
    assert len(pulls) == 1  # one pull of 3
    assert ("POST", "/api/v1/executions/report/") in fake.paths


def test_a_conflict_in_a_batch_report_drops_only_that_agenda():
    fake = FakePop()
    kept = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 0.3}}])
    lost = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 30}}])
    fake.conflict_agendas.add(lost)

    worker = make_worker(fake, concurrency=2, batch=2, max_agendas=2)
    worker.run()

    assert worker.outcomes == {kept: "succeeded", lost: "dropped"}
    assert fake.final(kept)["state"] == "succeeded"
    assert fake.reports(lost) == []
    assert ("POST", "/api/v1/executions/report/") in fake.paths


def test_stop_hands_back_running_work_as_failed_and_exits_zero():
    fake = FakePop()
    agenda_id = fake.submit(
        [
            {"name": "quick", "type": "log", "payload": {"message": "x"}},
            {"name": "long", "type": "sleep", "payload": {"seconds": 60}, "depends_on": ["quick"]},
        ]
    )
    worker = make_worker(fake, drain_seconds=0.3)
    thread, box = run_in_thread(worker)
    deadline = time.monotonic() + 5
    while "executing" not in fake_states(fake, agenda_id, "long") and time.monotonic() < deadline:
        time.sleep(0.05)

    worker.stop()
    thread.join(5)

    assert box["code"] == 0
    final = fake.final(agenda_id)
    assert final["state"] == "failed"
    assert "shut down; handed back for retry" in final["message"]
    assert fake.op_states(agenda_id, "quick")[-1] == "succeeded"
    assert fake.op_states(agenda_id, "long")[-1] == "failed"


def fake_states(fake, agenda_id, name):
    with fake.lock:
        try:
            return fake.op_states(agenda_id, name)
        except StopIteration:
            return []


def test_stop_lets_short_work_finish_within_the_drain_period():
    fake = FakePop()
    agenda_id = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 0.5}}])
    worker = make_worker(fake, drain_seconds=10)
    thread, box = run_in_thread(worker)
    deadline = time.monotonic() + 5
    while not fake_states(fake, agenda_id, "nap") and time.monotonic() < deadline:
        time.sleep(0.02)

    worker.stop()
    thread.join(5)

    assert box["code"] == 0
    assert fake.final(agenda_id)["state"] == "succeeded"


def test_unknown_insight_name_exits_with_an_error():
    worker = make_worker(FakePop(), insight="no-such-insight")

    assert worker.run() == 1


def test_a_server_error_at_start_up_is_retried_not_fatal():
    fake = FakePop()
    fake.fail_insights = 4  # more than the client's own retries of one call
    agenda_id = fake.submit([{"name": "a", "type": "log", "payload": {"message": "hi"}}])

    assert make_worker(fake, max_agendas=1, insight="media").run() == 0

    assert fake.final(agenda_id)["state"] == "succeeded"


def test_idle_exit():
    worker = make_worker(FakePop(), idle_exit_seconds=0.2)
    started = time.monotonic()

    assert worker.run() == 0
    assert time.monotonic() - started < 3.0


def test_max_agendas_waits_for_running_work_even_past_the_drain_period():
    fake = FakePop()
    agenda_id = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 0.5}}])

    assert make_worker(fake, max_agendas=1, drain_seconds=0.05).run() == 0

    assert fake.final(agenda_id)["state"] == "succeeded"


def test_report_interval_is_a_third_of_the_lease_capped():
    worker = make_worker(FakePop(), max_report_interval=20)

    assert worker.report_interval(30) == 10
    assert worker.report_interval(300) == 20
    assert worker.report_interval(0.3) == 0.2


# -- a real worker process over real HTTP ----------------------------------------------


class _Adapter(http.server.BaseHTTPRequestHandler):
    """Serves a FakePop over HTTP so a `pop worker` subprocess can talk to it."""

    protocol_version = "HTTP/1.1"

    def _handle(self):
        length = int(self.headers.get("Content-Length") or 0)
        request = httpx.Request(
            self.command,
            f"http://pop.test{self.path}",
            headers=dict(self.headers.items()),
            content=self.rfile.read(length),
        )
        response = self.server.fake(request)
        data = response.content
        self.send_response(response.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _handle

    def log_message(self, *args):
        pass


def serve(fake):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Adapter)
    server.daemon_threads = True
    server.fake = fake
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def start_worker_process(url, *extra):
    env = {key: value for key, value in os.environ.items() if not key.startswith("POP_")}
    env["POP_TOKEN"] = "t"
    return subprocess.Popen(
        [sys.executable, "-m", "popclient", "worker", "--url", url,
         "--insight", INSIGHT_ID, "--wait-seconds", "1", "--name", "proc", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_until(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_sigterm_hands_back_long_work_and_exits_zero():
    fake = FakePop()
    agenda_id = fake.submit(
        [
            {"name": "first", "type": "log", "payload": {"message": "x"}},
            {"name": "long", "type": "sleep", "payload": {"seconds": 60}, "depends_on": ["first"]},
        ]
    )
    server, url = serve(fake)
    process = start_worker_process(url, "--drain-seconds", "0.5")
    try:
        assert wait_until(lambda: "executing" in fake_states(fake, agenda_id, "long"))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        process.kill()
        server.shutdown()

    final = fake.final(agenda_id)
    assert final["state"] == "failed"
    assert "proc shut down; handed back for retry" in final["message"]
    assert fake.op_states(agenda_id, "first")[-1] == "succeeded"
    assert fake.op_states(agenda_id, "long")[-1] == "failed"
    assert not [e for e in fake.executions.values() if not e["done"]]  # nothing left running


def test_sigterm_lets_short_work_finish():
    fake = FakePop()
    agenda_id = fake.submit([{"name": "nap", "type": "sleep", "payload": {"seconds": 1}}])
    server, url = serve(fake)
    process = start_worker_process(url, "--drain-seconds", "20")
    try:
        assert wait_until(lambda: "executing" in fake_states(fake, agenda_id, "nap"))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        process.kill()
        server.shutdown()

    assert fake.final(agenda_id)["state"] == "succeeded"


class _Calls:
    def __init__(self):
        self.names = []
        self.cancelled = []

    def registry(self):
        registry = default_registry()

        def nap(payload, ctx):
            self.names.append(ctx.operation_name)
            started = time.monotonic()
            if ctx.sleep(payload.get("seconds", 0)):
                self.cancelled.append((ctx.operation_name, time.monotonic() - started))
                raise Cancelled("stopped")
            return {}

        registry.register("nap", nap)
        return registry


def test_a_pull_answer_whose_lease_already_ended_starts_nothing():
    fake = FakePop(lease_seconds=-5)
    agenda_id = fake.submit([{"name": "a", "type": "nap", "payload": {}}])
    calls = _Calls()
    worker = make_worker(fake, max_agendas=1, registry=calls.registry())

    assert worker.run() == 0

    assert calls.names == []
    assert worker.outcomes == {agenda_id: "dropped"}


def test_a_lease_that_cannot_be_renewed_cancels_the_running_handler_and_starts_nothing_after():
    fake = FakePop(lease_seconds=1.2)
    fake.fail_reports = 10_000  # the server never answers a renewal
    agenda_id = fake.submit(
        [
            {"name": "a", "type": "nap", "payload": {"seconds": 30}},
            {"name": "b", "type": "nap", "payload": {}, "depends_on": ["a"]},
        ]
    )
    calls = _Calls()
    worker = make_worker(fake, max_agendas=1, registry=calls.registry())
    started = time.monotonic()

    assert worker.run() == 0

    assert calls.names == ["a"]
    # The agenda is dropped at once; its handler thread sees the cancel a moment later.
    deadline = time.monotonic() + 3
    while not calls.cancelled and time.monotonic() < deadline:
        time.sleep(0.02)
    ((name, ran),) = calls.cancelled
    assert name == "a" and ran < 2.0  # stopped when the 1.2 s lease lapsed, not after 30 s
    assert time.monotonic() - started < 10
    assert worker.outcomes == {agenda_id: "dropped"}


def test_the_lease_is_timed_from_when_the_pull_was_sent_whatever_the_servers_clock():
    fake = FakePop(lease_seconds=3600)  # a server clock an hour ahead would say this
    run = make_worker(fake)
    sent = time.monotonic() - 2.5
    agenda = AgendaRun(
        run,
        {
            "agenda": {"id": "x", "operations": [{"name": "a", "type": "echo"}]},
            "execution": {
                "id": "e",
                "lease_token": "t",
                "lease_expires_at": fake.lease(),
                "lease_seconds": 3,
            },
        },
        sent_at=sent,
    )

    assert 0 < agenda.lease.left() <= 0.5
    assert not agenda.fresh()


def test_a_worker_that_cannot_reach_the_server_retries_within_3_seconds():
    from popclient.transport import RETRY_CAP_SECONDS, retry_delay

    delays = [retry_delay(failures) for failures in range(1, 40)]

    assert 0.2 <= delays[0] <= 0.3
    assert max(delays) <= RETRY_CAP_SECONDS * 1.2 <= 3.6
    assert delays[2] > delays[0]  # it backs off, a little
