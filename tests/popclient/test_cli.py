"""The ``pop`` CLI against a MockTransport server: parsing, --json, tables, exit codes."""

import io
import json
import os
import socket
import stat
import subprocess
import sys
from unittest import mock

import httpx
import pytest

from popclient.cli import build_parser, main
from popclient.client import PopClient

AGENDA = {
    "id": "a1",
    "state": "executing",
    "priority": 5,
    "link_id": "batch-7",
    "created_at": "2030-01-01T00:00:00Z",
    "operations": [{"name": "probe", "type": "mediainfo"}, {"name": "encode", "type": "transcode"}],
    "progress": {
        "state": "executing",
        "percent_complete": 60.0,
        "attempts_completed": 0,
        "message": "Running Operations",
        "operations": [
            {"name": "probe", "state": "succeeded", "percent_complete": 100, "result": {"w": 1}},
            {"name": "encode", "state": "executing", "percent_complete": 20, "message": "x"},
        ],
    },
}


class Server:
    """Routes (method, path) to answers; each answer is (status, body) or a list of them."""

    def __init__(self, routes=None):
        self.routes = dict(routes or {})
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        key = (request.method, request.url.path.removeprefix("/api/v1"))
        answer = self.routes.get(key, (404, {"detail": "Not found."}))
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        status, body = answer
        return httpx.Response(status, json=body)

    def factory(self, url, token, **kwargs):
        self.url, self.token = url, token
        return PopClient(
            url, token, transport=httpx.MockTransport(self), sleep=lambda s: None, **kwargs
        )

    def body(self, index=-1):
        return json.loads(self.requests[index].content)


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    monkeypatch.setenv("POP_CONFIG", str(tmp_path / "pop.json"))
    monkeypatch.delenv("POP_URL", raising=False)
    monkeypatch.delenv("POP_TOKEN", raising=False)
    return tmp_path / "pop.json"


def pop(server, *argv, auth=True):
    """Run `pop`; with `auth`, against http://pop.test with the token `tok` from POP_TOKEN."""
    stdout, stderr = io.StringIO(), io.StringIO()
    args = ["--url", "http://pop.test", *argv] if auth else list(argv)
    with mock.patch.dict(os.environ, {"POP_TOKEN": "tok"} if auth else {}):
        code = main(args, client_factory=server.factory, stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


# -- parsing ---------------------------------------------------------------------------


def test_global_options_are_accepted_before_and_after_the_command():
    parser = build_parser()

    before = parser.parse_args(["--json", "--url", "http://a", "agendas", "show", "x"])
    after = parser.parse_args(["agendas", "show", "x", "--json", "--url", "http://b"])

    assert (before.json, before.url, before.id) == (True, "http://a", "x")
    assert (after.json, after.url) == (True, "http://b")


def test_usage_errors_exit_2():
    server = Server()

    assert pop(server, "agendas")[0] == 2
    assert pop(server, "agendas", "frobnicate")[0] == 2
    assert pop(server, "agendas", "submit", "x.json", "--priority", "12")[0] == 2
    assert server.requests == []


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "Exit codes" in capsys.readouterr().out


def test_missing_url_is_a_usage_error():
    code, _, err = pop(Server(), "queues", auth=False)

    assert code == 2
    assert "no server URL" in err


def test_url_and_token_from_environment(monkeypatch):
    monkeypatch.setenv("POP_URL", "http://env.test")
    monkeypatch.setenv("POP_TOKEN", "env-token")
    server = Server({("GET", "/queues/"): (200, {"results": []})})

    code, _, _ = pop(server, "queues", auth=False)

    assert code == 0
    assert (server.url, server.token) == ("http://env.test", "env-token")
    assert server.requests[0].headers["Authorization"] == "Token env-token"


def test_a_token_on_the_command_line_is_refused_before_any_request():
    server = Server({("GET", "/queues/"): (200, {"results": []})})

    code, _, err = pop(server, "--token", "secret", "queues", auth=False)

    assert code == 2
    assert "--token is not accepted" in err and "POP_TOKEN" in err
    assert server.requests == []


def test_the_token_is_read_from_the_token_file_option(tmp_path):
    token_file = tmp_path / "worker.token"
    token_file.write_text("file-token\n")
    server = Server({("GET", "/queues/"): (200, {"results": []})})

    code, _, _ = pop(
        server, "--url", "http://pop.test", "--token-file", str(token_file), "queues", auth=False
    )

    assert code == 0
    assert server.requests[0].headers["Authorization"] == "Token file-token"


def test_the_token_is_read_from_the_file_named_by_pop_token_file(tmp_path, monkeypatch):
    token_file = tmp_path / "worker.token"
    token_file.write_text("  mounted-secret  \n")
    monkeypatch.setenv("POP_TOKEN_FILE", str(token_file))
    server = Server({("GET", "/queues/"): (200, {"results": []})})

    code, _, _ = pop(server, "--url", "http://pop.test", "queues", auth=False)

    assert code == 0
    assert server.token == "mounted-secret"


def test_a_missing_or_empty_token_file_is_a_usage_error(tmp_path):
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    server = Server()

    missing = pop(server, "--url", "http://x", "--token-file", str(tmp_path / "no"), "queues",
                  auth=False)  # fmt: skip
    blank = pop(server, "--url", "http://x", "--token-file", str(empty), "queues", auth=False)

    assert (missing[0], blank[0]) == (2, 2)
    assert "cannot read the token file" in missing[2] and "is empty" in blank[2]
    assert server.requests == []


def test_the_worker_takes_its_token_from_pop_token(monkeypatch):
    monkeypatch.setenv("POP_TOKEN", "worker-secret")
    insight = "6f1c1c2e-0000-4000-8000-000000000001"
    server = Server({("POST", f"/insights/{insight}/pull/"): (200, [])})

    code, _, _ = pop(
        server, "--url", "http://pop.test", "worker", "--insight", insight, "--wait-seconds", "0",
        "--idle-exit", "0.2", auth=False,
    )  # fmt: skip

    assert code == 0
    assert server.requests[0].headers["Authorization"] == "Token worker-secret"


def test_pop_tokens_create_prints_the_key_once_and_list_shows_no_key():
    created = {"token": "k" * 64, "id": "t1", "name": "ci", "expiry": None, "username": "u"}
    server = Server(
        {
            ("POST", "/tokens/"): (201, created),
            ("GET", "/tokens/"): (200, {"count": 1, "next": None, "results": [
                {k: v for k, v in created.items() if k != "token"}]}),
            ("DELETE", "/tokens/t1/"): (204, None),
        }
    )  # fmt: skip

    code, out, err = pop(server, "tokens", "create", "ci", "--expires-in-days", "7")
    listed = pop(server, "tokens", "list")
    revoked = pop(server, "tokens", "revoke", "t1")

    assert code == 0
    assert out.strip() == "k" * 64
    assert "cannot be shown again" in err
    assert server.body(0) == {"name": "ci", "expires_in_days": 7}
    assert listed[0] == 0 and "ci" in listed[1] and "k" * 64 not in listed[1]
    assert revoked[0] == 0 and server.requests[-1].method == "DELETE"


# -- login and config ------------------------------------------------------------------


def test_login_saves_token_to_the_config_file_and_later_commands_use_it(isolated_config):
    server = Server(
        {
            ("POST", "/auth/token/"): (200, {"token": "fresh"}),
            ("GET", "/queues/"): (200, {"results": []}),
        }
    )

    code, out, _ = pop(
        server, "login", "--url", "http://pop.test", "-u", "alice", "--password", "pw", auth=False
    )

    assert code == 0
    assert "Logged in to http://pop.test as alice" in out
    assert json.loads(isolated_config.read_text())["token"] == "fresh"
    assert stat.S_IMODE(os.stat(isolated_config).st_mode) == 0o600
    assert server.body(0) == {
        "username": "alice",
        "password": "pw",
        "name": f"pop-cli@{socket.gethostname()}",
    }

    assert pop(server, "queues", auth=False)[0] == 0
    assert server.requests[-1].headers["Authorization"] == "Token fresh"


def test_login_with_bad_password_exits_6(isolated_config):
    server = Server({("POST", "/auth/token/"): (400, {"non_field_errors": ["Bad credentials"]})})

    code, _, err = pop(
        server, "login", "--url", "http://x", "-u", "a", "--password", "b", auth=False
    )

    assert code == 6
    assert "Bad credentials" in err
    assert not isolated_config.exists()


# -- agendas ---------------------------------------------------------------------------


def test_agendas_list_json_prints_the_results_array():
    server = Server({("GET", "/agendas/"): (200, {"count": 1, "next": None, "results": [AGENDA]})})

    code, out, _ = pop(
        server, "agendas", "list", "--state", "executing", "--link-id", "L", "--json"
    )

    assert code == 0
    assert json.loads(out) == [AGENDA]
    params = server.requests[0].url.params
    assert (params["state"], params["link_id"], params["limit"]) == ("executing", "L", "50")


def test_agendas_list_sends_each_label_as_a_key_value_filter():
    server = Server({("GET", "/agendas/"): (200, {"count": 0, "next": None, "results": []})})

    code, _, _ = pop(
        server, "agendas", "list", "--label", "batch=42", "--label", "src=s3://a=b", "--json"
    )

    assert code == 0
    assert server.requests[0].url.params.get_list("label") == ["batch:42", "src:s3://a=b"]


def test_agendas_list_refuses_a_label_without_a_value():
    server = Server()

    code, _, err = pop(server, "agendas", "list", "--label", "batch")

    assert code != 0
    assert "KEY=VALUE" in err
    assert server.requests == []


def test_agendas_list_table():
    server = Server({("GET", "/agendas/"): (200, {"count": 1, "next": None, "results": [AGENDA]})})

    code, out, _ = pop(server, "agendas", "list")

    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["ID", "STATE", "DONE", "PRIORITY", "LINK_ID", "CREATED_AT"]
    assert lines[1].split() == ["a1", "executing", "60%", "5", "batch-7", "2030-01-01T00:00:00Z"]


def test_agendas_show_prints_operations():
    server = Server({("GET", "/agendas/a1/"): (200, AGENDA)})

    code, out, _ = pop(server, "agendas", "show", "a1")

    assert code == 0
    assert "State      executing" in out
    assert "probe      mediainfo  succeeded  100%" in out
    assert "encode     transcode  executing  20%   x" in out


def test_agendas_show_lists_the_outputs_the_operations_declared():
    finished = {
        **AGENDA,
        "outputs": [
            {
                "operation": "encode",
                "path": "/media/out/clip.mp4",
                "url": None,
                "kind": "video",
                "bytes": 52311,
            },
            {"operation": "pack", "path": None, "url": "https://cdn.example/m.m3u8", "kind": "hls"},
        ],
    }
    server = Server({("GET", "/agendas/a1/"): (200, finished)})

    code, out, _ = pop(server, "agendas", "show", "a1")

    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["OUTPUT", "OF"])
    assert lines[header + 1].split() == ["encode", "video", "/media/out/clip.mp4", "52311"]
    assert lines[header + 2].split()[:3] == ["pack", "hls", "https://cdn.example/m.m3u8"]


def test_agendas_show_says_why_an_agenda_waits():
    waiting = {
        **AGENDA,
        "state": "queued",
        "waiting_reason": {
            "code": "queued",
            "message": "Queued on insight media at position 3.",
            "detail": {"position": 3},
        },
    }
    server = Server({("GET", "/agendas/a1/"): (200, waiting)})

    code, out, _ = pop(server, "agendas", "show", "a1")

    assert code == 0
    assert "Waiting    Queued on insight media at position 3." in out


@pytest.mark.parametrize(
    ("status", "expected"),
    [(404, 3), (409, 4), (400, 5), (413, 5), (401, 6), (403, 6), (500, 1), (418, 1)],
)
def test_http_errors_map_to_documented_exit_codes(status, expected):
    server = Server({("POST", "/agendas/a1/abort/"): (status, {"detail": "nope"})})

    code, _, err = pop(server, "agendas", "abort", "a1")

    assert code == expected
    assert "nope" in err


def test_conflict_json_error_for_scripts():
    detail = "agenda a1 is succeeded; cannot become paused"
    server = Server({("POST", "/agendas/a1/pause/"): (409, {"detail": detail})})

    code, out, err = pop(server, "--json", "agendas", "pause", "a1")

    assert code == 4
    assert json.loads(out) == {
        "error": detail,
        "status": 409,
        "errors": None,
        "cid": None,
        "exit_code": 4,
    }
    assert detail in err


def test_submit_validation_error_prints_field_errors_and_exits_5(tmp_path):
    errors = {"operations.0.depends_on": ["Unknown operation: ghost"]}
    server = Server({("POST", "/agendas/"): (400, errors)})
    path = tmp_path / "agenda.json"
    path.write_text(json.dumps([{"name": "a", "type": "log", "depends_on": ["ghost"]}]))

    code, _, err = pop(server, "agendas", "submit", str(path))

    assert code == 5
    assert "operations.0.depends_on: Unknown operation: ghost" in err


def test_submit_sends_operations_with_overrides_and_params(tmp_path):
    server = Server({("POST", "/agendas/"): (201, {"id": "a9", "state": "ready"})})
    path = tmp_path / "agenda.json"
    path.write_text(json.dumps({"operations": [{"name": "a", "type": "log"}], "params": {"x": 1}}))

    code, out, _ = pop(
        server, "agendas", "submit", str(path), "--link-id", "L", "--priority", "9",
        "--param", "n=3", "--param", "s=text", "--idempotency-key", "k1", "--json",
    )  # fmt: skip

    assert code == 0
    assert json.loads(out) == {"id": "a9", "state": "ready"}
    assert server.body() == {
        "operations": [{"name": "a", "type": "log"}],
        "params": {"x": 1, "n": 3, "s": "text"},
        "link_id": "L",
        "priority": 9,
    }
    assert server.requests[0].headers["Idempotency-Key"] == "k1"


def test_submit_adds_labels_and_a_cost_to_the_agendas_own(tmp_path):
    server = Server({("POST", "/agendas/"): (201, {"id": "a9", "state": "ready"})})
    path = tmp_path / "agenda.json"
    agenda = {"operations": [{"name": "a", "type": "log"}], "labels": {"a": "1"}}
    path.write_text(json.dumps(agenda))

    code, _, _ = pop(
        server, "agendas", "submit", str(path), "--label", "batch=42", "--label", "a=2",
        "--cost", "12.5", "--json",
    )  # fmt: skip

    assert code == 0
    assert server.body()["labels"] == {"a": "2", "batch": "42"}
    assert server.body()["cost"] == 12.5


def test_submit_from_stdin_with_wait_exits_by_outcome(monkeypatch):
    done = {**AGENDA, "state": "failed", "progress": {**AGENDA["progress"], "state": "failed"}}
    server = Server(
        {
            ("POST", "/agendas/"): (201, {"id": "a1", "state": "ready"}),
            ("GET", "/agendas/a1/"): [(200, AGENDA), (200, done)],
        }
    )
    monkeypatch.setattr(sys, "stdin", io.StringIO('[{"name": "a", "type": "fail"}]'))
    monkeypatch.setattr("popclient.cli.watching.time.sleep", lambda s: None)

    code, out, err = pop(server, "agendas", "submit", "-", "--wait")

    assert code == 1
    assert "Submitted agenda a1" in out
    assert "agenda a1 failed" in err


def test_bulk_submit_reports_per_item_errors_with_exit_5(tmp_path):
    results = [{"id": "a1", "state": "ready"}, {"errors": {"operations": ["required"]}}]
    server = Server({("POST", "/agendas/bulk/"): (200, {"results": results})})
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"agendas": [{"operations": [{"name": "a", "type": "log"}]}, {}]}))

    code, out, _ = pop(server, "agendas", "submit", str(path), "--bulk", "--link-id", "L")

    assert code == 5
    assert "rejected" in out and "a1" in out
    assert server.body() == {
        "agendas": [
            {"operations": [{"name": "a", "type": "log"}], "link_id": "L"},
            {"link_id": "L"},
        ]
    }


def test_watch_polls_until_terminal_and_exits_0_on_success(monkeypatch):
    succeeded = {**AGENDA, "state": "succeeded", "progress": {**AGENDA["progress"],
                                                             "percent_complete": 100}}  # fmt: skip
    server = Server({("GET", "/agendas/a1/"): [(200, AGENDA), (200, AGENDA), (200, succeeded)]})
    monkeypatch.setattr("popclient.cli.watching.time.sleep", lambda s: None)

    code, out, _ = pop(server, "agendas", "watch", "a1")

    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2  # unchanged polls print nothing new when not a terminal
    assert "60.0%  executing" in lines[0] and "encode 20%" in lines[0]
    assert "100.0%  succeeded" in lines[1]


def test_watch_json_prints_the_final_agenda_and_exits_1_when_aborted(monkeypatch):
    aborted = {**AGENDA, "state": "aborted"}
    server = Server({("GET", "/agendas/a1/"): [(200, AGENDA), (200, aborted)]})
    monkeypatch.setattr("popclient.cli.watching.time.sleep", lambda s: None)

    code, out, _ = pop(server, "agendas", "watch", "a1", "--json")

    assert code == 1
    assert json.loads(out)["state"] == "aborted"


def test_watch_gives_up_after_max_wait():
    server = Server({("GET", "/agendas/a1/"): (200, AGENDA)})

    code, _, err = pop(server, "agendas", "watch", "a1", "--max-wait", "0", "--interval", "0")

    assert code == 1
    assert "still executing" in err


def test_watch_of_a_missing_agenda_exits_3():
    assert pop(Server(), "agendas", "watch", "nope")[0] == 3


def test_rerun_with_operations_resets_those():
    server = Server({("POST", "/agendas/a1/rerun/"): (200, {"id": "a1", "state": "ready"})})

    code, out, _ = pop(server, "agendas", "rerun", "a1", "--operations", "encode, notify")

    assert code == 0
    assert server.body() == {"mode": "operations_to_reset", "operations": ["encode", "notify"]}
    assert "rerun (operations_to_reset) accepted (state ready)" in out


def test_rerun_default_is_continue():
    server = Server({("POST", "/agendas/a1/rerun/"): (200, {"id": "a1", "state": "ready"})})

    pop(server, "agendas", "rerun", "a1", "--skip-execution")

    assert server.body() == {"mode": "continue", "skip_execution": True}


def test_resume_prints_new_state():
    server = Server({("POST", "/agendas/a1/resume/"): (200, {"id": "a1", "state": "ready"})})

    code, out, _ = pop(server, "agendas", "resume", "a1")

    assert (code, out.strip()) == (0, "Agenda a1: resume accepted (state ready)")


# -- templates, schedules, queues ------------------------------------------------------


def test_templates_run_with_payload_from_file(tmp_path):
    server = Server({("POST", "/agenda-templates/t1/run/"): (201, {"id": "a5", "state": "ready"})})
    payload = tmp_path / "payload.json"
    payload.write_text('{"source": "in.mp4"}')

    code, out, _ = pop(
        server, "templates", "run", "t1", "--payload", f"@{payload}", "--link-id", "L", "--json"
    )

    assert code == 0
    assert json.loads(out)["id"] == "a5"
    assert server.body() == {"link_id": "L", "payload": {"source": "in.mp4"}}


def test_templates_preview_prints_the_expanded_agenda():
    expanded = {"operations": [{"name": "a", "type": "log", "payload": {"v": True}}]}
    server = Server(
        {("POST", "/agenda-templates/t1/preview/"): (200, {"agenda": expanded, "errors": {}})}
    )

    code, out, _ = pop(server, "templates", "preview", "t1", "--payload", '{"v": true}')

    assert code == 0
    assert json.loads(out) == expanded
    assert server.body() == {"payload": {"v": True}}
    assert pop(server, "templates", "preview", "t1", "--payload", "{not json")[0] == 2


def test_templates_preview_with_errors_exits_5():
    errors = {"operations.0.type": ["This field is required."]}
    answer = {"agenda": {"operations": [{"name": "a"}]}, "errors": errors}
    server = Server({("POST", "/agenda-templates/t1/preview/"): (200, answer)})

    code, out, err = pop(server, "templates", "preview", "t1", "--json")

    assert code == 5
    assert json.loads(out) == answer
    assert "operations.0.type: This field is required." in err


def test_templates_list_and_show():
    template = {"id": "t1", "name": "encode", "description": "Encode a file", "agenda": {}}
    server = Server(
        {
            ("GET", "/agenda-templates/"): (200, {"results": [template]}),
            ("GET", "/agenda-templates/t1/"): (200, template),
        }
    )

    code, out, _ = pop(server, "templates", "list")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["t1", "encode"]

    code, out, _ = pop(server, "templates", "show", "t1", "--json")
    assert code == 0 and json.loads(out) == template


def test_schedules_create_and_actions():
    created = {"id": "s1", "cron": "*/5 * * * *", "next_run_at": "2030-01-01T00:05:00Z"}
    server = Server(
        {
            ("POST", "/schedules/"): (201, created),
            ("POST", "/schedules/s1/pause/"): (200, {"id": "s1", "state": "paused"}),
            ("POST", "/schedules/s1/trigger/"): (201, {"id": "a7", "state": "ready"}),
            ("GET", "/schedules/s1/runs/"): (200, {"results": [{"id": "a7", "state": "ready"}]}),
            ("GET", "/schedules/"): (
                200,
                {"results": [{**created, "name": "n", "state": "active"}]},
            ),
        }
    )

    code, out, _ = pop(
        server, "schedules", "create", "--name", "nightly", "--template", "t1",
        "--cron", "*/5 * * * *", "--payload", '{"a": 1}', "--overlap", "skip", "--link-id", "L",
    )  # fmt: skip
    assert code == 0 and "Created schedule s1" in out
    assert server.body() == {
        "name": "nightly",
        "template": "t1",
        "cron": "*/5 * * * *",
        "payload": {"a": 1},
        "overlap": "skip",
        "link_id": "L",
    }
    assert "pause accepted (state paused)" in pop(server, "schedules", "pause", "s1")[1]
    assert "triggered: agenda a7" in pop(server, "schedules", "trigger", "s1")[1]
    assert json.loads(pop(server, "schedules", "runs", "s1", "--json")[1])[0]["id"] == "a7"
    assert "*/5 * * * *" in pop(server, "schedules", "list")[1]
    assert pop(server, "schedules", "create", "--name", "x")[0] == 2


def test_queues_table_and_json():
    queue = {"insight": "i1", "insight_name": "media", "queue_size": 10, "queued": 3, "ready": 40,
             "executing": 2, "oldest_ready_age_seconds": 12.4}  # fmt: skip
    server = Server({("GET", "/queues/"): (200, {"results": [queue]})})

    code, out, _ = pop(server, "queues")
    assert code == 0
    assert out.splitlines()[1].split() == ["media", "3/10", "40", "2", "12s"]
    assert json.loads(pop(server, "queues", "--json")[1]) == [queue]


def test_progress_summary():
    summary = {"link_id": "L", "processing_state": "executing", "percent_complete": 50,
               "counts": {"succeeded": 1, "executing": 1}}  # fmt: skip
    server = Server({("GET", "/progress-summary/"): (200, summary)})

    code, out, _ = pop(server, "progress", "L")

    assert code == 0
    assert out.splitlines()[0].startswith("L: executing [")
    assert server.requests[0].url.params["link_id"] == "L"


def test_cid_flag_is_sent_as_header():
    server = Server({("GET", "/queues/"): (200, {"results": []})})

    pop(server, "queues", "--cid", "trace-42")

    assert server.requests[0].headers["X-POP-CID"] == "trace-42"


# -- worker ----------------------------------------------------------------------------


def test_worker_command_runs_until_idle_and_exits_0():
    insight = "6f1c1c2e-0000-4000-8000-000000000001"
    server = Server({("POST", f"/insights/{insight}/pull/"): (200, {"agendas": []})})

    code, _, _ = pop(
        server, "worker", "--insight", insight, "--wait-seconds", "0", "--idle-exit", "0.2",
        "--allow-exec", "--name", "w1",
    )  # fmt: skip

    assert code == 0
    body = server.body(0)
    assert len(body.pop("request_id")) == 32  # a new id per pull: a lost answer can be re-asked
    assert body == {"count": 1, "worker": "w1", "wait_seconds": 0.0}


def test_worker_with_a_bad_token_exits_1():
    insight = "6f1c1c2e-0000-4000-8000-000000000001"
    server = Server({("POST", f"/insights/{insight}/pull/"): (401, {"detail": "Invalid token."})})

    assert pop(server, "worker", "--insight", insight, "--wait-seconds", "0")[0] == 1


def test_worker_with_a_missing_handlers_module_is_a_usage_error():
    code, _, err = pop(Server(), "worker", "--insight", "x", "--handlers", "no.such.module")

    assert code == 2
    assert "cannot import handlers" in err


# -- as a program ----------------------------------------------------------------------


def test_python_m_popclient_runs_the_cli(tmp_path):
    env = {**os.environ, "POP_CONFIG": str(tmp_path / "none.json")}
    env.pop("POP_URL", None)
    env.pop("POP_TOKEN", None)

    helped = subprocess.run([sys.executable, "-m", "popclient", "--help"], capture_output=True,
                            text=True, env=env, timeout=30)  # fmt: skip
    refused = subprocess.run(
        [sys.executable, "-m", "popclient", "--url", "http://127.0.0.1:9", "--json", "queues"],
        capture_output=True, text=True, env={**env, "POP_TOKEN": "t"}, timeout=60,
    )  # fmt: skip

    assert helped.returncode == 0 and "agendas" in helped.stdout
    assert refused.returncode == 1
    assert "ConnectError" in json.loads(refused.stdout)["error"]


# -- ids as the pages show them, templates by name ---------------------------------------

FULL = "e839d0e0-1111-4222-8333-444455556666"


def test_a_unique_id_prefix_names_the_agenda():
    agenda = {"id": FULL, "state": "ready", "progress": {"state": "ready"}, "operations": []}
    server = Server(
        {
            ("GET", "/agendas/"): (200, {"results": [agenda]}),
            ("GET", f"/agendas/{FULL}/"): (200, agenda),
        }
    )

    code, out, _ = pop(server, "agendas", "show", "e839d0e0", "--json")

    assert code == 0 and json.loads(out)["id"] == FULL
    assert server.requests[0].url.params["id_prefix"] == "e839d0e0"


def test_an_ambiguous_prefix_lists_the_candidates_and_exits_2():
    rows = [
        {"id": FULL, "state": "ready", "link_id": "batch-1"},
        {"id": FULL.replace("6666", "7777"), "state": "failed", "link_id": ""},
    ]
    server = Server({("GET", "/agendas/"): (200, {"results": rows})})

    code, _, err = pop(server, "agendas", "abort", "e839")

    assert code == 2
    assert "matches several agendas" in err
    assert FULL in err and "batch-1" in err
    assert [request.method for request in server.requests] == ["GET"]


def test_a_prefix_nobody_has_says_what_was_looked_up():
    server = Server({("GET", "/agendas/"): (200, {"results": []})})

    code, _, err = pop(server, "agendas", "show", "deadbeef")

    assert code == 3
    assert "'deadbeef'" in err and "id prefix" in err


def test_a_template_runs_by_name():
    template = {"id": FULL, "name": "probe-transcode-package", "customer": "c1"}
    server = Server(
        {
            ("GET", "/agenda-templates/"): (200, {"results": [template]}),
            ("POST", f"/agenda-templates/{FULL}/run/"): (201, {"id": "a9", "state": "ready"}),
        }
    )

    code, out, _ = pop(server, "templates", "run", "probe-transcode-package", "--json")

    assert code == 0 and json.loads(out)["id"] == "a9"
    assert server.requests[0].url.params["name"] == "probe-transcode-package"


def test_output_cut_short_by_the_reader_is_not_a_crash():
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    agenda = {"id": "a1", "state": "ready", "progress": {"state": "ready"}, "operations": []}
    server = Server({("GET", "/agendas/a1/"): (200, agenda)})
    stderr = io.StringIO()

    with mock.patch.dict(os.environ, {"POP_TOKEN": "tok"}):
        code = main(
            ["--url", "http://pop.test", "agendas", "show", "a1"],
            stdout=ClosedPipe(),
            stderr=stderr,
            client_factory=server.factory,
        )

    assert code == 0
    assert "Traceback" not in stderr.getvalue()


# -- actions on a set ------------------------------------------------------------------


def test_agendas_abort_with_a_filter_dry_run_prints_the_counts_and_starts_nothing():
    server = Server(
        {
            ("POST", "/agendas/actions/"): (
                200,
                {"dry_run": True, "action": "abort", "matched": 6, "would_change": 3},
            )
        }
    )

    code, out, _ = pop(
        server, "agendas", "abort", "--filter", "state=failed", "--filter", "state=ready",
        "--filter", "template=t1", "--label", "batch=42", "--dry-run",
    )  # fmt: skip

    assert code == 0
    assert "6 agendas match, 3 would change" in out
    assert server.body() == {
        "action": "abort",
        "filter": {"state": ["failed", "ready"], "template": "t1", "label": ["batch:42"]},
        "dry_run": True,
    }
    assert len(server.requests) == 1


def test_agendas_rerun_with_a_filter_follows_the_job_until_it_is_done(monkeypatch):
    monkeypatch.setattr("popclient.cli.agenda_sets.POLL_SECONDS", 0)
    job = {"id": "j1", "action": "rerun", "matched": 5, "skipped": {}, "error": ""}
    server = Server(
        {
            ("POST", "/agendas/actions/"): (
                202,
                {**job, "status": "running", "done": False, "processed": 0, "changed": 0},
            ),
            ("GET", "/agendas/actions/j1/"): [
                (200, {**job, "status": "running", "done": False, "processed": 3, "changed": 3}),
                (
                    200,
                    {
                        **job,
                        "status": "done",
                        "done": True,
                        "processed": 5,
                        "changed": 4,
                        "skipped": {"executing: cannot rerun": 1},
                    },
                ),
            ],
        }
    )

    code, out, _ = pop(server, "agendas", "rerun", "--label", "batch=42", "--mode", "reset_all")

    assert code == 0
    assert server.body(0) == {
        "action": "rerun",
        "filter": {"label": ["batch:42"]},
        "mode": "reset_all",
        "dry_run": False,
    }
    assert "rerun job j1: 3/5 done, 3 changed, 0 skipped (running)" in out
    assert "rerun job j1: 5/5 done, 4 changed, 1 skipped (done)" in out
    assert "skipped 1: executing: cannot rerun" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["agendas", "abort"],
        ["agendas", "abort", "a1", "--label", "batch=1"],
        ["agendas", "pause", "a1", "--dry-run"],
        ["agendas", "abort", "--filter", "state"],
        ["agendas", "abort", "--filter", "link_id=a", "--filter", "link_id=b"],
        ["agendas", "rerun", "--label", "b=1", "--operations", "probe"],
    ],
)
def test_agendas_actions_refuse_an_unclear_selection_before_calling_the_server(argv):
    server = Server()

    code, _, err = pop(server, *argv)

    assert code == 2, err
    assert server.requests == []


def test_agendas_pause_now_asks_the_server_to_stop_running_operations_at_once():
    server = Server({("POST", "/agendas/a1/pause/"): (200, AGENDA)})

    code, out, _ = pop(server, "agendas", "pause", "a1", "--now")

    assert code == 0
    assert server.body() == {"mode": "now"}
