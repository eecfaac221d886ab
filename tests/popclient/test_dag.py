"""The DAG runner without a server (popclient/README.md)."""

import threading
import time

from popclient.dag import DagRunner
from popclient.handlers import (
    Cancelled,
    HandlerError,
    HandlerRegistry,
    PermanentError,
    default_registry,
)
from popclient.operation_state import DEADLOCK_MESSAGE


def op(name, type_="echo", payload=None, **extra):
    return {"name": name, "type": type_, "payload": payload if payload is not None else {}, **extra}


def run(operations, *, registry=None, prior=None, **kwargs):
    runner = DagRunner(
        {"id": "agenda-1", "operations": operations},
        registry=registry or default_registry(),
        prior_progress=prior,
        **kwargs,
    )
    return runner.run()


class Recorder:
    """Handlers that record when they ran, for overlap and ordering assertions."""

    def __init__(self):
        self.lock = threading.Lock()
        self.spans = {}
        self.calls = []
        self.running = 0
        self.max_running = 0

    def timed(self, payload, ctx):
        with self.lock:
            self.calls.append(ctx.operation_name)
            self.running += 1
            self.max_running = max(self.max_running, self.running)
        start = time.monotonic()
        ctx.sleep(payload.get("seconds", 0.3))
        with self.lock:
            self.running -= 1
        self.spans[ctx.operation_name] = (start, time.monotonic())
        return payload.get("result", {"name": ctx.operation_name})

    def registry(self, **extra):
        registry = default_registry()
        registry.register("timed", self.timed)
        for name, func in extra.items():
            registry.register(name, func)
        return registry


def test_two_independent_operations_overlap_in_time():
    recorder = Recorder()
    started = time.monotonic()

    result = run(
        [op("a", "timed", {"seconds": 0.5}), op("b", "timed", {"seconds": 0.5})],
        registry=recorder.registry(),
    )

    elapsed = time.monotonic() - started
    assert result.state == "succeeded"
    (a_start, a_end), (b_start, b_end) = recorder.spans["a"], recorder.spans["b"]
    assert a_start < b_end and b_start < a_end  # the intervals overlap
    assert elapsed < 0.9


def test_parallelism_is_capped_by_max_parallel():
    recorder = Recorder()

    result = run(
        [op(f"op{i}", "timed", {"seconds": 0.15}) for i in range(5)],
        registry=recorder.registry(),
        max_parallel=2,
    )

    assert result.state == "succeeded"
    assert recorder.max_running == 2
    assert sorted(recorder.calls) == [f"op{i}" for i in range(5)]


def test_dependencies_from_depends_on_and_references_order_execution():
    recorder = Recorder()

    result = run(
        [
            op("c", "timed", {"seconds": 0.01, "x": "@<b.out::/name>"}),
            op("b", "timed", {"seconds": 0.01}, depends_on=["a"]),
            op("a", "timed", {"seconds": 0.01}),
            op("d", "timed", {"seconds": 0.01}, depends_on="a, c"),
            op("e", "timed", {"seconds": 0.01}, params={"dependsOn": "d"}),
        ],
        registry=recorder.registry(),
    )

    assert result.state == "succeeded"
    assert recorder.calls == ["a", "b", "c", "d", "e"]


def test_fail_fast_starts_nothing_new_but_lets_running_operations_finish():
    recorder = Recorder()

    result = run(
        [
            op("slow", "timed", {"seconds": 0.4}),
            op("boom", "fail", {"message": "disk full"}),
            op("after_boom", "timed", {"seconds": 0.01}, depends_on=["boom"]),
            op("after_slow", "timed", {"seconds": 0.01}, depends_on=["slow"]),
        ],
        registry=recorder.registry(),
    )

    assert result.state == "failed"
    assert result.message == "Operation boom failed: disk full"
    states = {name: state.state for name, state in result.operations.items()}
    assert states == {
        "slow": "succeeded",
        "boom": "failed",
        "after_boom": "waiting",
        "after_slow": "waiting",
    }
    assert recorder.calls == ["slow"]
    assert result.operations["boom"].diagnostics[0]["message"] == "disk full"
    assert result.diagnostics[0]["code"] == "fail"


def test_fail_fast_with_one_slot_never_starts_the_next_operation():
    recorder = Recorder()

    result = run(
        [op("boom", "fail"), op("later", "timed", {"seconds": 0.01})],
        registry=recorder.registry(),
        max_parallel=1,
    )

    assert result.state == "failed"
    assert recorder.calls == []
    assert result.operations["later"].state == "waiting"


def test_deadlock_on_a_dependency_cycle_is_detected_and_reported():
    started = time.monotonic()

    result = run(
        [
            op("ok"),
            op("a", depends_on=["b"]),
            op("b", payload={"x": "@<a.out::/y>"}),
        ]
    )

    assert time.monotonic() - started < 1.0
    assert result.state == "failed"
    assert result.message.startswith(DEADLOCK_MESSAGE)
    assert "a waits for b" in result.message and "b waits for a" in result.message
    assert result.operations["ok"].state == "succeeded"
    assert result.diagnostics[-1]["code"] == "deadlock"


def test_dependency_on_an_unknown_operation_is_a_deadlock():
    result = run([op("a", depends_on=["ghost"])])

    assert result.state == "failed"
    assert result.message == f"{DEADLOCK_MESSAGE} a waits for ghost"


def test_references_resolve_with_their_json_types_including_booleans():
    result = run(
        [
            op(
                "probe",
                payload={"width": 640, "hdr": False, "progressive": True, "tags": ["x"], "n": None},
            ),
            op(
                "encode",
                payload={
                    "width": "@<probe.out::/width>",
                    "hdr": "@<probe.out::/hdr>",
                    "progressive": "@<probe.out::/progressive>",
                    "tags": "@<probe.out::/tags>",
                    "n": "@<probe.out::/n>",
                    "label": "w=@<probe.out::/width> hdr=@<probe.out::/hdr>",
                    "agenda": "@<pop.agendaId>",
                    "me": "@<pop.operationName>",
                    "height": "@<probe.out::/height?480>",
                },
            ),
        ]
    )

    assert result.state == "succeeded"
    assert result.operations["encode"].result == {
        "width": 640,
        "hdr": False,
        "progressive": True,
        "tags": ["x"],
        "n": None,
        "label": "w=640 hdr=false",
        "agenda": "agenda-1",
        "me": "encode",
        "height": "480",
    }


def test_invalid_reference_fails_the_operation_with_a_clear_message():
    result = run([op("a", payload={"w": 1}), op("b", payload={"h": "@<a.out::/height>"})])

    assert result.state == "failed"
    assert result.message.startswith("Operation b has invalid references:")
    assert result.operations["b"].diagnostics[0]["code"] == "invalid_reference"


def test_unknown_operation_type_fails_with_pop_message():
    result = run([op("a", type_="teleport")])

    assert result.state == "failed"
    assert result.message == "Unknown operation type found: teleport on operation: a"


def test_retry_skips_succeeded_operations_and_feeds_their_results_forward():
    recorder = Recorder()
    seen = {}

    def resume(payload, ctx):
        seen["prior"] = ctx.prior
        seen["params"] = dict(ctx.params)
        seen["payload"] = payload
        return {"resumed_from": ctx.params["cursor"]}

    prior = {
        "state": "pending",
        "attempts_completed": 1,
        "operations": [
            {"name": "first", "state": "succeeded", "percent_complete": 100, "result": {"id": 7}},
            {
                "name": "second",
                "state": "failed",
                "percent_complete": 40,
                "result": None,
                "params": {"cursor": 40},
                "diagnostics": [{"message": "network down", "code": "error"}],
            },
            {"name": "third", "state": "waiting", "percent_complete": 0},
        ],
    }

    result = run(
        [
            op("first", "timed", {"seconds": 0}),
            op("second", "resume", {"id": "@<first.out::/id>"}),
            op("third", "echo", {"id": "@<first.out::/id>", "r": "@<second.out>"}),
        ],
        registry=recorder.registry(resume=resume),
        prior=prior,
    )

    assert result.state == "succeeded"
    assert recorder.calls == []  # "first" was not run again
    assert seen["payload"] == {"id": 7}
    assert seen["params"] == {"cursor": 40}
    assert seen["prior"]["diagnostics"] == [{"message": "network down", "code": "error"}]
    assert result.operations["third"].result == {"id": 7, "r": {"resumed_from": 40}}
    assert result.operations["first"].skipped is True
    assert result.operations["first"].version == 0  # nothing to report for it


def test_fail_handler_with_times_succeeds_on_the_retry_using_prior_params():
    operations = [op("flaky", "fail", {"times": 1, "result": {"done": True}})]

    first = run(operations)
    prior = {"operations": [first.operations["flaky"].report()]}
    second = run(operations, prior=prior)

    assert first.state == "failed"
    assert first.operations["flaky"].params == {"failures": 1}
    assert second.state == "succeeded"
    assert second.operations["flaky"].result == {"done": True}


def test_timeout_seconds_fails_the_operation_and_cancels_its_handler():
    cancelled = threading.Event()

    def stubborn(payload, ctx):
        ctx.cancelled.wait(10)
        cancelled.set()
        return {}

    registry = default_registry()
    registry.register("stubborn", stubborn)
    started = time.monotonic()

    result = run([op("slow", "stubborn", timeout_seconds=0.3)], registry=registry)

    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 1.0
    assert result.state == "failed"
    assert result.message == "Operation slow timed out after 0.3 s"
    assert result.operations["slow"].diagnostics[-1]["code"] == "timeout"
    assert cancelled.wait(1.0)


def test_abort_cancels_running_handlers_and_starts_nothing_more():
    recorder = Recorder()
    runner = DagRunner(
        {
            "id": "agenda-1",
            "operations": [
                op("nap", "sleep", {"seconds": 30}),
                op("next", "timed", {"seconds": 0}, depends_on=["nap"]),
            ],
        },
        registry=recorder.registry(),
    )
    threading.Timer(0.2, runner.request_abort).start()
    started = time.monotonic()

    result = runner.run()

    assert time.monotonic() - started < 1.0
    assert result.state == "aborted"
    assert result.operations["nap"].state == "aborted"
    assert result.operations["next"].state == "waiting"
    assert recorder.calls == []


def test_abort_gives_up_on_a_handler_that_ignores_cancellation_after_the_grace():
    def deaf(payload, ctx):
        time.sleep(3)

    registry = default_registry()
    registry.register("deaf", deaf)
    runner = DagRunner(
        {"id": "x", "operations": [op("deaf", "deaf")]},
        registry=registry,
        abort_grace_seconds=0.3,
    )
    threading.Timer(0.1, runner.request_abort).start()
    started = time.monotonic()

    result = runner.run()

    assert time.monotonic() - started < 1.0
    assert result.state == "aborted"
    assert result.operations["deaf"].state == "aborted"


def test_pause_lets_running_operations_finish_and_starts_no_new_ones():
    recorder = Recorder()
    runner = DagRunner(
        {
            "id": "agenda-1",
            "operations": [
                op("a", "timed", {"seconds": 0.4}),
                op("b", "timed", {"seconds": 0}, depends_on=["a"]),
            ],
        },
        registry=recorder.registry(),
    )
    threading.Timer(0.1, runner.request_pause).start()

    result = runner.run()

    assert result.state == "paused"
    assert result.operations["a"].state == "succeeded"
    assert result.operations["b"].state == "waiting"
    assert recorder.calls == ["a"]
    assert result.percent_complete == 50.0


def test_resume_after_pause_runs_only_the_remaining_operations():
    recorder = Recorder()
    operations = [op("a", "timed", {"seconds": 0}), op("b", "timed", {"seconds": 0})]
    prior = {"operations": [{"name": "a", "state": "succeeded", "result": {"name": "a"}}]}

    result = run(operations, registry=recorder.registry(), prior=prior)

    assert result.state == "succeeded"
    assert recorder.calls == ["b"]


def test_percent_complete_rolls_up_succeeded_and_running_operations():
    halfway = threading.Event()
    release = threading.Event()

    def half(payload, ctx):
        ctx.report_progress(50, "half done", {"step": 1})
        halfway.set()
        release.wait(5)
        return {}

    registry = default_registry()
    registry.register("half", half)
    changes = []
    runner = DagRunner(
        {"id": "a", "operations": [op("done"), op("half", "half", depends_on=["done"])]},
        registry=registry,
        on_change=changes.append,
    )
    thread = threading.Thread(target=runner.run)
    thread.start()
    assert halfway.wait(5)

    assert runner.percent_complete() == 75.0
    items, versions = runner.changes_since({})
    by_name = {item["name"]: item for item in items}
    assert by_name["done"]["state"] == "succeeded"
    assert by_name["half"] == {
        "name": "half",
        "state": "executing",
        "percent_complete": 50,
        "message": "half done",
        "params": {"step": 1},
    }
    assert runner.changes_since(versions)[0] == []

    release.set()
    thread.join(5)
    assert True in changes and False in changes  # state changes urgent, progress not


def test_handler_exception_fails_only_its_operation_with_a_traceback():
    def broken(payload, ctx):
        raise KeyError("oops")

    registry = default_registry()
    registry.register("broken", broken)

    result = run([op("x", "broken")], registry=registry)

    assert result.state == "failed"
    diagnostics = result.operations["x"].diagnostics
    assert diagnostics[0]["message"] == "Failed to execute operation: x: KeyError: 'oops'"
    assert "Traceback" in diagnostics[0]["detail"]


def test_handler_error_code_and_detail_are_kept():
    def picky(payload, ctx):
        raise HandlerError("bad input", code="invalid_payload", detail={"field": "url"})

    registry = HandlerRegistry({"picky": picky})

    result = run([op("x", "picky")], registry=registry)

    entry = result.operations["x"].diagnostics[0]
    assert (entry["message"], entry["code"], entry["detail"]) == (
        "bad input",
        "invalid_payload",
        {"field": "url"},
    )
    assert entry["time"].endswith("Z")


def test_generated_operations_are_persisted_then_run():
    persisted = []

    def generator(payload, ctx):
        ctx.add_operations([{"name": "child", "type": "echo", "payload": {"v": "@<gen.out::/n>"}}])
        return {"n": 3}

    registry = default_registry()
    registry.register("generator", generator)

    result = run([op("gen", "generator")], registry=registry, on_add_operations=persisted.extend)

    assert result.state == "succeeded"
    assert persisted[0]["name"] == "child"
    assert persisted[0]["params"] == {"generatedOperationParent": "gen"}
    assert result.operations["child"].result == {"v": 3}
    assert result.percent_complete == 100.0


def test_agenda_without_operations_fails_with_pop_message():
    result = run([])

    assert result.state == "failed"
    assert result.message == "No operations in Agenda. Nothing to do."


def test_duplicate_names_fail_the_agenda():
    result = run([op("a"), op("A")])

    assert result.state == "failed"
    assert "unique" in result.message


def test_a_handler_that_cancels_itself_fails_the_agenda():
    def quitter(payload, ctx):
        raise Cancelled("gave up")

    registry = default_registry()
    registry.register("quitter", quitter)

    result = run([op("q", "quitter"), op("after", depends_on=["q"])], registry=registry)

    assert result.state == "failed"
    assert result.operations["q"].state == "failed"
    assert result.message == "Operation q cancelled itself: gave up"


def test_a_permanent_error_marks_the_operation_and_the_run_not_retryable():
    def refuse(payload, ctx):
        raise PermanentError("payload needs an input", code="invalid_payload")

    registry = default_registry()
    registry.register("refuse", refuse)

    result = run([op("a", "refuse"), op("b", depends_on=["a"])], registry=registry)

    assert (result.state, result.retryable) == ("failed", False)
    assert result.operations["a"].report()["retryable"] is False
    assert "retryable" not in result.operations["b"].report()


def test_an_ordinary_failure_stays_retryable():
    result = run([op("a", "fail", {"message": "try again"})])

    assert (result.state, result.retryable) == ("failed", True)
    assert "retryable" not in result.operations["a"].report()


def test_an_unknown_operation_type_is_not_retryable():
    result = run([op("a", "no-such-type")])

    assert (result.state, result.retryable) == ("failed", False)


class _Gate:
    """A lease that is short until renewed (`renewals` answers), or lost."""

    def __init__(self, *, renews: bool):
        self.renews = renews
        self.is_fresh = False
        self.renewals = 0
        self.runner = None

    def fresh(self):
        return self.is_fresh

    def renew(self):
        self.renewals += 1
        if self.renews:
            self.is_fresh = True
        else:
            self.runner.cancel(message="execution lost: renewal refused")


def test_no_operation_starts_on_a_short_lease_until_it_is_renewed():
    gate = _Gate(renews=True)
    runner = DagRunner(
        {"id": "agenda-1", "operations": [op("a")]}, registry=default_registry(), lease=gate
    )

    result = runner.run()

    assert result.state == "succeeded"
    assert gate.renewals == 1


def test_a_lost_lease_starts_nothing_and_ends_the_run():
    gate = _Gate(renews=False)
    runner = DagRunner(
        {"id": "agenda-1", "operations": [op("a"), op("b", depends_on=["a"])]},
        registry=default_registry(),
        lease=gate,
    )
    gate.runner = runner

    result = runner.run()

    assert result.state == "aborted"
    assert {name: state.state for name, state in result.operations.items()} == {
        "a": "waiting",
        "b": "waiting",
    }


def test_a_withdrawn_pause_lets_the_run_go_on():
    recorder = Recorder()
    runner = DagRunner(
        {
            "id": "agenda-1",
            "operations": [
                op("a", "timed", {"seconds": 0.4}),
                op("b", "timed", {"seconds": 0.01}, depends_on=["a"]),
            ],
        },
        registry=recorder.registry(),
    )
    threading.Timer(0.1, runner.request_pause).start()
    threading.Timer(0.2, runner.withdraw_pause).start()

    result = runner.run()

    assert result.state == "succeeded"
    assert recorder.calls == ["a", "b"]


def _resumable(started: threading.Event):
    """A handler that saves its place in params, then works until cancelled."""

    def handler(payload, ctx):
        ctx.report_progress(40, "40 % encoded", {"segment": 4})
        started.set()
        ctx.cancelled.wait(5)
        return {"finished": not ctx.cancelled.is_set()}

    return handler


def test_a_pause_now_stops_running_operations_at_once_and_keeps_their_progress():
    started = threading.Event()
    registry = default_registry()
    registry.register("resumable", _resumable(started))
    runner = DagRunner(
        {"id": "x", "operations": [op("encode", "resumable"), op("pack", "resumable")]},
        registry=registry,
        max_parallel=1,
    )
    threading.Thread(
        target=lambda: started.wait(5) and runner.request_pause(now=True), daemon=True
    ).start()
    begun = time.monotonic()

    result = runner.run()

    assert time.monotonic() - begun < 2.0  # not the handler's 5 s
    assert result.state == "paused"
    encode = result.operations["encode"]
    assert (encode.state, encode.params, encode.percent_complete) == ("waiting", {"segment": 4}, 40)
    assert encode.completed_at is None
    assert result.operations["pack"].state == "waiting"  # never started


def test_a_pause_now_ends_a_handler_that_ignores_it_after_the_grace():
    def deaf(payload, ctx):
        time.sleep(3)
        return {}

    registry = default_registry()
    registry.register("deaf", deaf)
    runner = DagRunner(
        {"id": "x", "operations": [op("deaf", "deaf")]}, registry=registry, abort_grace_seconds=0.3
    )
    threading.Timer(0.1, lambda: runner.request_pause(now=True)).start()
    begun = time.monotonic()

    result = runner.run()

    assert time.monotonic() - begun < 1.5
    assert (result.state, result.operations["deaf"].state) == ("paused", "waiting")


def test_a_pause_after_running_can_be_escalated_to_now():
    started = threading.Event()
    registry = default_registry()
    registry.register("resumable", _resumable(started))
    runner = DagRunner({"id": "x", "operations": [op("encode", "resumable")]}, registry=registry)
    threading.Thread(target=lambda: started.wait(5) and runner.request_pause(), daemon=True).start()
    threading.Timer(0.5, lambda: runner.request_pause(now=True)).start()  # escalated later

    result = runner.run()

    assert result.state == "paused"
    assert result.operations["encode"].state == "waiting"  # the escalation stopped it
