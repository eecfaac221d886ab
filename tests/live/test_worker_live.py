"""The reference worker against the live server and a real cluster (issue 7).

Each test has its own tenant (insight with a 6 s lease, so the worker reports every 2 s).
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.live.conftest import HANDLERS_MODULE, ROOT, TERMINAL, pop_command, stop_process, wait_for

pytestmark = pytest.mark.django_db

PRODUCED = {
    "count": 3,
    "ratio": 0.5,
    "ok": True,
    "off": False,
    "nothing": None,
    "name": "clip",
    "tags": ["a", "b"],
    "size": {"width": 640, "height": 360},
}


def _worker_process(tenant, tmp_path: Path, *args: str) -> subprocess.Popen:
    log = open(tmp_path / "worker.log", "w")
    process = subprocess.Popen(
        [
            *pop_command(), "worker",
            "--url", tenant.url,
            "--wait-seconds", "1", "--handlers", HANDLERS_MODULE, *args,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "POP_TOKEN": tenant.worker_token},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    log.close()
    return process


def test_three_operations_pass_typed_results_forward_through_pop_worker(tenant, tmp_path):
    # `finish` needs `mix`, `mix` needs `produce`: only through references, no depends_on.
    operations = [
        {"name": "finish", "type": "echo", "payload": {
            "count": "@<mix.out::/count>",
            "ok": "@<mix.out::/ok>",
            "off": "@<produce.out::/off>",
            "ratio": "@<produce.out::/ratio>",
            "nothing": "@<produce.out::/nothing>",
            "tags": "@<mix.out::/tags>",
            "size": "@<produce.out::/size>",
            "label": "@<mix.out::/label>",
            "sentence": "@<mix.out::/label> ok=@<mix.out::/ok> w=@<mix.out::/width>",
            "fallback": "@<mix.out::/missing?none-here>",
        }},
        {"name": "mix", "type": "echo", "payload": {
            "count": "@<produce.out::/count>",
            "ok": "@<produce.out::/ok>",
            "tags": "@<produce.out::/tags>",
            "width": "@<produce.out::/size/width>",
            "label": "@<produce.out::/name>-@<produce.out::/count>",
        }},
        {"name": "produce", "type": "echo", "payload": PRODUCED},
    ]  # fmt: skip
    client = tenant.client()
    agenda = client.submit_agenda({"operations": operations, "link_id": "three-ops"})
    assert agenda["insight"] == tenant.insight_id

    worker = _worker_process(
        tenant, tmp_path, "--insight", tenant.insight_name, "--max-agendas", "1"
    )
    try:
        assert worker.wait(timeout=30) == 0, (tmp_path / "worker.log").read_text()
    finally:
        stop_process(worker, timeout=0)

    agenda = tenant.wait_state(agenda["id"], TERMINAL, timeout=5)
    assert agenda["state"] == "succeeded", agenda["progress"]
    assert agenda["percent_complete"] == 100
    operations = {op["name"]: op for op in agenda["progress"]["operations"]}
    assert {name: op["state"] for name, op in operations.items()} == {
        "finish": "succeeded",
        "mix": "succeeded",
        "produce": "succeeded",
    }
    assert operations["produce"]["result"] == PRODUCED
    final = operations["finish"]["result"]
    assert final == {
        "count": 3,
        "ok": True,
        "off": False,
        "ratio": 0.5,
        "nothing": None,
        "tags": ["a", "b"],
        "size": {"width": 640, "height": 360},
        "label": "clip-3",
        "sentence": "clip-3 ok=true w=640",
        "fallback": "none-here",
    }
    # JSON types survive: an int is not a float or a string, a bool is not an int.
    assert type(final["count"]) is int
    assert type(final["ok"]) is bool and type(final["off"]) is bool
    assert type(final["ratio"]) is float
    # Dependencies finished first (one report may carry several, hence <=).
    assert operations["produce"]["completed_at"] <= operations["mix"]["completed_at"]
    assert operations["mix"]["completed_at"] <= operations["finish"]["completed_at"]
    [execution] = tenant.executions(agenda["id"])
    assert execution["outcome"] == "succeeded"


def _final_report_at(worker, execution_id: str, state: str) -> float | None:
    for at, execution, fields, _ in list(worker.client.answers):
        if execution == execution_id and fields.get("state") == state:
            return at
    return None


def _abort_when_running(tenant, worker, agenda_id: str, operation: str) -> tuple[str, float]:
    """Abort once `operation` runs; the execution and when its worker was told (monotonic)."""
    wait_for(
        lambda: tenant.operations(agenda_id)[operation]["state"] == "executing",
        timeout=15,
        what=f"{operation} to run",
    )
    execution = tenant.agenda(agenda_id)["progress"]["current_execution"]
    answer = tenant.client().abort_agenda(agenda_id)
    assert answer["state"] == "executing"  # the worker stops it, at its next report
    assert answer["progress"]["abort_requested"] is True
    flagged = wait_for(
        lambda: worker.client.first_answer(execution, "abort"),
        timeout=5,  # the next report: at most a third of the 6 s lease later
        interval=0.02,
        what="a report answer carrying abort",
    )
    return execution, flagged


def test_abort_stops_a_running_sleep_within_2s_of_the_report_carrying_the_flag(
    tenant, start_worker
):
    client = tenant.client()
    agenda = client.submit_agenda(
        {
            "operations": [
                {"name": "nap", "type": "sleep", "payload": {"seconds": 60}},
                {"name": "after", "type": "log", "depends_on": ["nap"]},
            ]
        }
    )
    worker = start_worker()
    execution, flagged = _abort_when_running(tenant, worker, agenda["id"], "nap")

    reported = wait_for(
        lambda: _final_report_at(worker, execution, "aborted"),
        timeout=5,
        interval=0.02,
        what="the aborted report",
    )
    assert reported - flagged < 2.0, f"aborted reported {reported - flagged:.2f}s after the flag"
    agenda = tenant.wait_state(agenda["id"], "aborted", timeout=2)
    operations = {op["name"]: op for op in agenda["progress"]["operations"]}
    assert operations["nap"]["state"] == "aborted"
    assert operations["nap"]["percent_complete"] < 100
    assert operations["nap"]["result"] is None
    assert operations["after"]["state"] in {"waiting", "aborted"}
    assert operations["after"]["attempt_count"] == 0
    [run] = tenant.executions(agenda["id"])
    assert run["outcome"] == "aborted"
    assert worker.worker.outcomes[agenda["id"]] == "aborted"


def _stopped(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # exited but not reaped yet: not running either
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize(
    "script",
    [
        pytest.param('echo $$ > "$0"; exec sleep 60', id="exits-on-sigterm"),
        # SIGTERM ignored: the worker's SIGKILL after its 1 s grace ends it.
        pytest.param('trap "" TERM; echo $$ > "$0"; exec sleep 60', id="ignores-sigterm"),
    ],
)
def test_abort_stops_a_running_exec_subprocess_within_2s_of_the_report_carrying_the_flag(
    tenant, start_worker, tmp_path, script
):
    pid_file = tmp_path / "child.pid"
    client = tenant.client()
    agenda = client.submit_agenda(
        {
            "operations": [
                {
                    "name": "run",
                    "type": "exec",
                    "payload": {"argv": ["sh", "-c", script, str(pid_file)]},
                }
            ]
        }
    )
    worker = start_worker(allow_exec=True)
    wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=15)
    pid = int(pid_file.read_text())
    assert not _stopped(pid)
    execution, flagged = _abort_when_running(tenant, worker, agenda["id"], "run")

    wait_for(lambda: _stopped(pid), timeout=5, interval=0.02, what=f"pid {pid} to stop")
    gone = time.monotonic()
    reported = wait_for(
        lambda: _final_report_at(worker, execution, "aborted"),
        timeout=5,
        interval=0.02,
        what="the aborted report",
    )
    assert gone - flagged < 2.0, f"pid {pid} ran {gone - flagged:.2f}s after the flag"
    assert reported - flagged < 2.0, f"aborted reported {reported - flagged:.2f}s after the flag"
    agenda = tenant.wait_state(agenda["id"], "aborted", timeout=2)
    [run] = agenda["progress"]["operations"]
    assert run["state"] == "aborted"
    assert tenant.executions(agenda["id"])[0]["outcome"] == "aborted"


def test_pause_then_resume_finishes_without_rerunning_completed_operations(tenant, start_worker):
    client = tenant.client()
    agenda = client.submit_agenda(
        {
            "operations": [
                {"name": "first", "type": "sleep", "payload": {"seconds": 0.5}},
                {"name": "second", "type": "sleep", "payload": {"seconds": 4},
                 "depends_on": ["first"]},
                {"name": "third", "type": "sleep", "depends_on": ["second"], "payload": {
                    "seconds": 0.3, "result": {"first": "@<first.out::/slept_seconds>"}}},
            ]
        }
    )  # fmt: skip
    agenda_id = agenda["id"]
    worker = start_worker()
    wait_for(
        lambda: tenant.operations(agenda_id)["second"]["state"] == "executing",
        timeout=15,
        what="second to run",
    )
    execution = tenant.agenda(agenda_id)["progress"]["current_execution"]
    answer = client.pause_agenda(agenda_id)
    assert answer["state"] == "executing"
    assert answer["progress"]["pause_requested"] is True

    # The running operation finishes, nothing new starts, the agenda is paused.
    paused = tenant.wait_state(agenda_id, "paused", timeout=12)
    before = {op["name"]: op for op in paused["progress"]["operations"]}
    assert {name: op["state"] for name, op in before.items()} == {
        "first": "succeeded",
        "second": "succeeded",
        "third": "waiting",
    }
    assert before["third"]["attempt_count"] == 0
    assert worker.client.first_answer(execution, "pause") is not None
    time.sleep(1)  # a paused agenda stays paused: the worker does not pull it again
    assert tenant.agenda(agenda_id)["state"] == "paused"

    resumed = client.resume_agenda(agenda_id)
    assert resumed["state"] in {"ready", "queued", "executing", "succeeded"}
    done = tenant.wait_state(agenda_id, TERMINAL, timeout=15)
    assert done["state"] == "succeeded", done["progress"]
    after = {op["name"]: op for op in done["progress"]["operations"]}
    for name in ("first", "second"):  # not run again: same attempt, timings and result
        assert after[name]["attempt_count"] == 1
        for key in ("state", "started_at", "completed_at", "result"):
            assert after[name][key] == before[name][key], (name, key)
    assert after["third"]["attempt_count"] == 1
    # The skipped operation's result was fed forward to the one that ran after the resume.
    assert after["third"]["result"] == {"first": before["first"]["result"]["slept_seconds"]}
    assert [e["outcome"] for e in tenant.executions(agenda_id)] == ["paused", "succeeded"]
    assert done["progress"]["attempts_completed"] == 1  # a pause is not a spent attempt


def test_sigterm_to_pop_worker_hands_its_agendas_back_and_none_is_stuck(
    tenant, start_worker, tmp_path
):
    client = tenant.client()

    def submit(first_seconds: float, priority: int) -> str:
        operations = [
            {"name": "quick", "type": "sleep", "payload": {"seconds": 0.3}},
            {"name": "slow", "type": "resumable_sleep", "depends_on": ["quick"],
             "payload": {"first_seconds": first_seconds, "retry_seconds": 0.5}},
        ]  # fmt: skip
        return client.submit_agenda(
            {"operations": operations, "retry_delay_seconds": 0, "priority": priority}
        )["id"]

    running = [submit(60, 5), submit(60, 5)]
    waiting = submit(0.5, 0)  # behind the two: the worker below never has a slot for it
    worker = _worker_process(
        tenant,
        tmp_path,
        "--insight", tenant.insight_id, "--concurrency", "2", "--drain-seconds", "1",
    )  # fmt: skip
    try:
        # Both slow operations run and the server has their resume state.
        for agenda_id in running:
            wait_for(
                lambda agenda_id=agenda_id: (
                    tenant.operations(agenda_id)["slow"]["params"] == {"attempt": 1}
                ),
                timeout=20,
                what="slow to report its first attempt",
            )
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0, (tmp_path / "worker.log").read_text()
    finally:
        stop_process(worker, timeout=0)
    log = (tmp_path / "worker.log").read_text()

    # Nothing is left executing under a lease no one renews: every execution has ended.
    for agenda_id in running:
        agenda = tenant.agenda(agenda_id)
        assert agenda["state"] in {"pending", "ready", "queued"}, (agenda["progress"], log)
        assert agenda["progress"]["current_execution"] is None
        assert agenda["progress"]["attempts_completed"] == 1
        [execution] = tenant.executions(agenda_id)
        assert execution["outcome"] == "failed"
        assert "handed back for retry" in json.dumps(execution["diagnostics"]) + json.dumps(
            agenda["progress"]
        )
        operations = tenant.operations(agenda_id)
        assert operations["quick"]["state"] == "succeeded"
        assert operations["slow"]["state"] != "executing"
        assert operations["slow"]["params"] == {"attempt": 1}
    assert tenant.agenda(waiting)["state"] in {"ready", "queued"}
    assert tenant.executions(waiting) == []

    # Another worker takes them all and they succeed, resuming where they stopped.
    start_worker(concurrency=3)
    for agenda_id in [*running, waiting]:
        agenda = tenant.wait_state(agenda_id, TERMINAL, timeout=20)
        assert agenda["state"] == "succeeded", agenda["progress"]
    for agenda_id in running:
        operations = tenant.operations(agenda_id)
        assert operations["quick"]["attempt_count"] == 1  # kept, not run again
        assert operations["slow"]["attempt_count"] == 2
        assert operations["slow"]["result"] == {"attempt": 2, "prior_state": "failed"}
        assert [e["outcome"] for e in tenant.executions(agenda_id)] == ["failed", "succeeded"]
    assert tenant.operations(waiting)["slow"]["result"]["attempt"] == 1


def test_batched_pulls_and_reports_run_several_agendas_and_deliver_an_abort(tenant, start_worker):
    client = tenant.client()
    quick = [
        client.submit_agenda(
            {
                "operations": [
                    {"name": "nap", "type": "sleep", "payload": {"seconds": 0.5}},
                    {"name": "tell", "type": "echo", "payload": {"n": n, "nap": "@<nap.out>"}},
                ],
                "link_id": "batch",
            }
        )["id"]
        for n in range(5)
    ]
    long = client.submit_agenda(
        {"operations": [{"name": "nap", "type": "sleep", "payload": {"seconds": 60}}]}
    )["id"]
    # Reports go through executions/report/, all those due at once in one call.
    worker = start_worker(batch=4, concurrency=6)
    execution, flagged = _abort_when_running(tenant, worker, long, "nap")
    reported = wait_for(
        lambda: _final_report_at(worker, execution, "aborted"),
        timeout=5,
        interval=0.02,
        what="the aborted report",
    )
    assert reported - flagged < 2.0, f"aborted reported {reported - flagged:.2f}s after the flag"
    assert tenant.wait_state(long, "aborted", timeout=2)
    for n, agenda_id in enumerate(quick):
        agenda = tenant.wait_state(agenda_id, TERMINAL, timeout=15)
        assert agenda["state"] == "succeeded", agenda["progress"]
        tell = {op["name"]: op for op in agenda["progress"]["operations"]}["tell"]
        assert tell["result"]["n"] == n
        assert tell["result"]["nap"]["slept_seconds"] >= 0.5
    batched = [fields for _, _, fields, _ in worker.client.answers if "lease_token" in fields]
    assert batched, "no report went through the batch endpoint"
    summary = client.progress_summary("batch")
    assert summary["counts"] == {"succeeded": 5}
    assert summary["percent_complete"] == 100
