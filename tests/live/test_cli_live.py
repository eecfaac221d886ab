"""Every `pop` command in a subprocess against the live server: `--json` parsed, exit codes checked.

Exit codes (popclient/README.md): 0 ok, 1 failure (agenda failed or aborted), 2 usage,
3 not found, 4 conflict, 5 validation, 6 authentication or permission.
"""

import json
import os
import stat
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from resourcepools.models import Membership
from tests.live.conftest import ROOT, committed, pop_command

pytestmark = pytest.mark.django_db


@dataclass
class Run:
    code: int
    data: Any
    stderr: str

    def __repr__(self) -> str:  # shown by failed asserts
        return f"Run(code={self.code}, data={self.data!r}, stderr={self.stderr!r})"


def _run(args: list[str], env: dict[str, str], stdin: str | None = None) -> Run:
    process = subprocess.run(
        [*pop_command(), *args, "--json"],
        input=stdin, capture_output=True, text=True, timeout=90, cwd=ROOT, env=env,
    )  # fmt: skip
    try:
        data = json.loads(process.stdout) if process.stdout.strip() else None
    except ValueError:
        pytest.fail(f"pop {' '.join(args)} printed no JSON: {process.stdout!r}")
    return Run(process.returncode, data, process.stderr)


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"POP_URL", "POP_TOKEN"}}
    env["POP_CONFIG"] = str(tmp_path / "pop-config.json")  # never a developer's saved login
    return env


@pytest.fixture
def pop(tenant, cli_env):
    """`POP_TOKEN=… pop --url … ARGS --json` in a subprocess; the parsed JSON and exit code."""

    def run(*args: str, token: str | None = None, stdin: str | None = None) -> Run:
        env = {**cli_env, "POP_TOKEN": token or tenant.admin_token}
        return _run(["--url", tenant.url, *args], env, stdin)

    return run


def _write(tmp_path, name: str, document: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return str(path)


def _error(run: Run, status: int, code: int) -> dict:
    assert run.code == code, run
    assert isinstance(run.data, dict), run
    assert run.data["status"] == status, run
    assert run.data["exit_code"] == code, run
    assert run.data["error"], run
    return run.data


TWO_STEPS = [
    {"name": "nap", "type": "sleep", "payload": {"seconds": 0.3}},
    {"name": "say", "type": "echo", "payload": {"slept": "@<nap.out::/slept_seconds>"}},
]


def test_agendas_submit_list_show_watch_rerun_and_executions(tenant, pop, start_worker, tmp_path):
    agenda_file = _write(tmp_path, "agenda.json", {"operations": TWO_STEPS})
    submitted = pop("agendas", "submit", agenda_file, "--link-id", "cli-1", "--priority", "7",
                    "--param", "lang=en", "--param", "n=3")  # fmt: skip
    assert submitted.code == 0, submitted
    agenda = submitted.data
    assert agenda["link_id"] == "cli-1"
    assert agenda["priority"] == 7
    assert agenda["params"] == {"lang": "en", "n": 3}
    assert agenda["insight"] == tenant.insight_id
    assert agenda["state"] in {"ready", "queued"}

    # A bare list of operations from stdin.
    from_stdin = pop("agendas", "submit", "-", "--link-id", "cli-1", stdin=json.dumps(TWO_STEPS))
    assert from_stdin.code == 0, from_stdin
    assert [op["name"] for op in from_stdin.data["operations"]] == ["nap", "say"]

    listed = pop("agendas", "list", "--link-id", "cli-1")
    assert listed.code == 0, listed
    assert isinstance(listed.data, list)
    assert {a["id"] for a in listed.data} == {agenda["id"], from_stdin.data["id"]}
    every = pop("agendas", "list", "--link-id", "cli-1", "--all", "--limit", "1")
    assert every.code == 0, every
    assert sorted(a["id"] for a in every.data) == sorted(a["id"] for a in listed.data)

    shown = pop("agendas", "show", agenda["id"])
    assert shown.code == 0, shown
    assert shown.data["id"] == agenda["id"]
    assert [op["name"] for op in shown.data["progress"]["operations"]] == ["nap", "say"]

    start_worker(concurrency=2)
    watched = pop("agendas", "watch", agenda["id"], "--interval", "0.2", "--max-wait", "30")
    assert watched.code == 0, watched
    assert watched.data["state"] == "succeeded"
    say = {op["name"]: op for op in watched.data["progress"]["operations"]}["say"]
    assert isinstance(say["result"]["slept"], float)

    summary = pop("progress", "cli-1")
    assert summary.code == 0, summary
    assert summary.data["link_id"] == "cli-1"

    rerun = pop("agendas", "rerun", agenda["id"], "--mode", "reset_all", "--wait")
    assert rerun.code == 0, rerun
    assert rerun.data["state"] == "succeeded"
    executions = pop("agendas", "executions", agenda["id"])
    assert executions.code == 0, executions
    assert sorted(e["outcome"] for e in executions.data) == ["succeeded", "succeeded"]
    assert sorted(e["number"] for e in executions.data) == [1, 2]

    # Rerunning only `say` keeps `nap` (and its attempt count) as it was.
    partial = pop("agendas", "rerun", agenda["id"], "--operations", "say")
    assert partial.code == 0, partial
    again = pop("agendas", "watch", agenda["id"], "--interval", "0.2", "--max-wait", "30")
    assert again.code == 0, again
    operations = {op["name"]: op for op in again.data["progress"]["operations"]}
    assert operations["say"]["state"] == "succeeded"
    assert len(pop("agendas", "executions", agenda["id"]).data) == 3


def test_agendas_pause_resume_abort_and_their_conflicts(tenant, pop, start_worker, tmp_path):
    agenda_file = _write(tmp_path, "agenda.json", {"operations": TWO_STEPS})
    held = pop("agendas", "submit", agenda_file, "--do-not-run").data
    assert held["state"] == "pending"

    paused = pop("agendas", "pause", held["id"])
    assert paused.code == 0, paused
    assert paused.data["state"] == "paused"
    _error(pop("agendas", "pause", held["id"]), 409, 4)

    resumed = pop("agendas", "resume", held["id"])
    assert resumed.code == 0, resumed
    assert resumed.data["state"] in {"ready", "queued"}
    _error(pop("agendas", "resume", held["id"]), 409, 4)  # not paused any more

    doomed = pop("agendas", "submit", agenda_file, "--do-not-run").data
    aborted = pop("agendas", "abort", doomed["id"])
    assert aborted.code == 0, aborted
    assert aborted.data["state"] == "aborted"
    conflict = _error(pop("agendas", "abort", doomed["id"]), 409, 4)
    assert "aborted" in conflict["error"]
    # watch ends at once on a terminal agenda, and an aborted one is a failure for scripts.
    watched = pop("agendas", "watch", doomed["id"], "--max-wait", "10")
    assert watched.code == 1, watched
    assert watched.data["state"] == "aborted"

    start_worker()
    watched = pop("agendas", "watch", held["id"], "--interval", "0.2", "--max-wait", "30")
    assert watched.code == 0, watched
    assert watched.data["state"] == "succeeded"
    _error(pop("agendas", "pause", held["id"]), 409, 4)  # finished: nothing to pause

    # --wait on a failing agenda: exit 1 with the final agenda.
    failing = _write(tmp_path, "fail.json", [{"name": "boom", "type": "fail"}])
    failed = pop("agendas", "submit", failing, "--max-attempts", "1", "--wait")
    assert failed.code == 1, failed
    assert failed.data["state"] == "failed"


def test_agenda_errors_map_to_exit_codes(tenant, pop, tmp_path):
    missing = str(uuid.uuid4())
    _error(pop("agendas", "show", missing), 404, 3)
    _error(pop("agendas", "abort", missing), 404, 3)

    invalid = _write(
        tmp_path,
        "invalid.json",
        [
            {"name": "a", "type": "echo", "depends_on": ["ghost"]},
            {"name": "A", "type": "echo"},
            {"name": "b", "type": "echo", "payload": {"x": "@<nobody.out::/x>"}},
        ],
    )
    rejected = _error(pop("agendas", "submit", invalid), 400, 5)
    fields = set(rejected["errors"])
    assert any("depends_on" in field for field in fields), rejected
    assert any(field.startswith("operations.1") for field in fields), rejected  # duplicate name
    assert len(fields) >= 3, rejected  # every issue, each with its field path

    bulk = _write(tmp_path, "bulk.json", [{"operations": TWO_STEPS}, {"operations": []}])
    results = pop("agendas", "submit", bulk, "--bulk")
    assert results.code == 5, results  # one item was rejected
    assert results.data[0]["state"] in {"ready", "queued"}
    assert "operations" in results.data[1]["errors"]

    unknown_type = _write(tmp_path, "type.json", [{"name": "x", "type": "teleport"}])
    assert "operations.0.type" in _error(pop("agendas", "submit", unknown_type), 400, 5)["errors"]

    _error(pop("agendas", "list", token="not-a-token"), 401, 6)
    agenda = pop("agendas", "submit", _write(tmp_path, "ok.json", TWO_STEPS), "--do-not-run")
    _error(pop("agendas", "abort", agenda.data["id"], token=tenant.viewer_token), 403, 6)

    assert pop("agendas", "submit", str(tmp_path / "absent.json")).code == 2


def test_templates_list_show_preview_run(tenant, pop, start_worker):
    listed = pop("templates", "list")
    assert listed.code == 0, listed
    assert [t["id"] for t in listed.data] == [tenant.template_id]

    shown = pop("templates", "show", tenant.template_id)
    assert shown.code == 0, shown
    assert shown.data["name"] == f"{tenant.name}-hello"
    assert shown.data["payload_schema"]["required"] == ["who"]

    preview = pop("templates", "preview", tenant.template_id, "--payload", '{"who": "ann"}')
    assert preview.code == 0, preview
    body = preview.data.get("agenda", preview.data)
    greet = {op["name"]: op for op in body["operations"]}["greet"]
    assert greet["payload"] == {"who": "ann"}
    assert not preview.data.get("errors")

    # The payload schema is enforced, by preview and by run.
    assert pop("templates", "preview", tenant.template_id, "--payload", '{"who": 7}').code == 5
    refused = _error(pop("templates", "run", tenant.template_id, "--payload", "{}"), 400, 5)
    assert refused["errors"], refused

    start_worker()
    ran = pop("templates", "run", tenant.template_id, "--payload", '{"who": "ann"}',
              "--link-id", "tpl", "--wait")  # fmt: skip
    assert ran.code == 0, ran
    assert ran.data["state"] == "succeeded"
    assert ran.data["template"] == tenant.template_id
    assert ran.data["link_id"] == "tpl"
    shout = {op["name"]: op for op in ran.data["progress"]["operations"]}["shout"]
    assert shout["result"] == {"text": "hello ann"}

    _error(pop("templates", "show", str(uuid.uuid4())), 404, 3)


def test_schedules_list_create_pause_resume_trigger(tenant, pop, start_worker):
    created = pop("schedules", "create", "--name", "nightly", "--template", tenant.template_id,
                  "--cron", "0 3 * * *", "--timezone", "Europe/Paris", "--payload",
                  '{"who": "cron"}', "--catch-up", "skip", "--overlap", "skip")  # fmt: skip
    assert created.code == 0, created
    schedule = created.data
    assert schedule["state"] == "active"
    assert schedule["cron"] == "0 3 * * *"
    assert schedule["timezone"] == "Europe/Paris"
    assert schedule["payload"] == {"who": "cron"}
    assert schedule["next_run_at"]

    listed = pop("schedules", "list")
    assert listed.code == 0, listed
    assert [s["id"] for s in listed.data] == [schedule["id"]]

    paused = pop("schedules", "pause", schedule["id"])
    assert paused.code == 0, paused
    assert paused.data["state"] == "paused"
    _error(pop("schedules", "pause", schedule["id"]), 409, 4)
    resumed = pop("schedules", "resume", schedule["id"])
    assert resumed.code == 0, resumed
    assert resumed.data["state"] == "active"
    _error(pop("schedules", "resume", schedule["id"]), 409, 4)

    start_worker()
    triggered = pop("schedules", "trigger", schedule["id"])
    assert triggered.code == 0, triggered
    agenda = triggered.data
    assert agenda["schedule"] == schedule["id"]
    assert agenda["template"] == tenant.template_id
    watched = pop("agendas", "watch", agenda["id"], "--interval", "0.2", "--max-wait", "30")
    assert watched.code == 0, watched
    shout = {op["name"]: op for op in watched.data["progress"]["operations"]}["shout"]
    assert shout["result"] == {"text": "hello cron"}

    runs = pop("schedules", "runs", schedule["id"])
    assert runs.code == 0, runs
    assert [a["id"] for a in runs.data] == [agenda["id"]]

    bad = _error(pop("schedules", "create", "--name", "bad", "--template", tenant.template_id,
                     "--cron", "61 * * * *", "--payload", '{"who": "x"}'), 400, 5)  # fmt: skip
    assert "cron" in bad["errors"], bad
    bad = _error(pop("schedules", "create", "--name", "bad", "--template", tenant.template_id,
                     "--cron", "0 3 * * *", "--payload", "{}"), 400, 5)  # fmt: skip
    assert "payload" in bad["errors"], bad  # the template's payload schema
    _error(pop("schedules", "trigger", str(uuid.uuid4())), 404, 3)
    _error(pop("schedules", "pause", schedule["id"], token=tenant.viewer_token), 403, 6)


def test_queues(tenant, pop, tmp_path):
    for _ in range(2):
        assert pop("agendas", "submit", _write(tmp_path, "a.json", TWO_STEPS)).code == 0
    queues = pop("queues")
    assert queues.code == 0, queues
    assert isinstance(queues.data, list)
    [mine] = [q for q in queues.data if q["insight"] == tenant.insight_id]
    assert mine["insight_name"] == tenant.insight_name
    assert mine["queue_size"] == 10
    assert mine["queued"] + mine["ready"] == 2  # no worker: they wait
    assert mine["executing"] == 0
    [customer] = mine["customers"]
    assert customer["customer"] == tenant.customer_id
    assert customer["queued"] + customer["ready"] == 2


def test_login_saves_the_server_and_token_for_later_commands(tenant, cli_env, tmp_path):
    def make_user() -> None:
        user = get_user_model().objects.create(username=f"{tenant.name}-login")
        user.set_password("s3cret-pass")
        user.save()
        Membership.objects.create(user=user, customer_id=tenant.customer_id, role="viewer")

    committed(make_user)
    config = Path(cli_env["POP_CONFIG"])

    assert _run(["queues"], cli_env).code == 2  # no URL or token configured yet
    wrong = _run(["--url", tenant.url, "login", "-u", f"{tenant.name}-login", "--password-stdin"],
                 cli_env, stdin="wrong\n")  # fmt: skip
    assert wrong.code == 6, wrong
    assert not config.exists()

    login = _run(["--url", tenant.url, "login", "-u", f"{tenant.name}-login", "--password-stdin"],
                 cli_env, stdin="s3cret-pass\n")  # fmt: skip
    assert login.code == 0, login
    assert login.data["config"] == str(config)
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    saved = json.loads(config.read_text())
    assert saved["url"] == tenant.url and saved["token"]

    listed = _run(["templates", "list"], cli_env)  # URL and token from the config file
    assert listed.code == 0, listed
    assert [t["id"] for t in listed.data] == [tenant.template_id]

    again = _run(["--url", tenant.url, "login"], {**cli_env, "POP_TOKEN": tenant.admin_token})
    assert again.code == 0, again
    assert json.loads(config.read_text())["token"] == tenant.admin_token
    refused = _run(["--url", tenant.url, "login"], {**cli_env, "POP_TOKEN": "not-a-token"})
    assert refused.code == 6, refused


def test_worker_refused_by_the_server_exits_1(tenant, cli_env):
    for token, insight in (("not-a-token", tenant.insight_id),
                           (tenant.admin_token, tenant.insight_id),  # not a worker
                           (tenant.worker_token, "no-such-insight")):  # fmt: skip
        process = subprocess.run(
            [*pop_command(), "worker", "--url", tenant.url,
             "--insight", insight, "--wait-seconds", "1"],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
            env={**cli_env, "POP_TOKEN": token},
        )  # fmt: skip
        assert process.returncode == 1, (token, insight, process.stderr)
