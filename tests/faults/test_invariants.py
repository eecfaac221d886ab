"""The invariant checks themselves catch what they are for (no processes: canned rows and runs).

A check that could not fail would prove nothing: each case here is a broken outcome that the
scenarios must never produce, and the check must name it.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.faults.invariants import (
    ExecutionRow,
    Freeze,
    attempts_only_for_real_failures,
    error_pages,
    never_two_open_executions,
    no_run_outside_its_execution,
    recovered_in_time,
)
from tests.faults.stack import Answer

pytestmark = pytest.mark.faults


@dataclass
class CannedStack:
    """What the checks read of a Stack: its run log, its submitted agendas, `sql` answers."""

    logs: Path
    submitted: dict[str, str] = field(default_factory=dict)
    rows: list[tuple] = field(default_factory=list)

    @property
    def runlog(self) -> Path:
        return self.logs / "runs.jsonl"

    def sql(self, query: str, params=()) -> list[tuple]:
        return self.rows

    def log_runs(self, *records: dict) -> None:
        self.runlog.write_text("".join(json.dumps(record) + "\n" for record in records))


def _execution(agenda="a1", worker="w1", started=100.0, ended=110.0, outcome="succeeded", n=1):
    return ExecutionRow(f"e-{agenda}-{n}", agenda, n, worker, started, ended, outcome)


def test_an_operation_started_after_its_execution_was_reclaimed_is_named(tmp_path):
    stack = CannedStack(tmp_path)
    stack.log_runs({"agenda": "a1", "operation": "first", "worker": "w1", "at": 111.0})

    found = no_run_outside_its_execution(stack, [_execution(outcome="reclaimed")], [])

    assert found == ["operations started after their execution ended: ['w1 first +1.00s']"]


def test_a_run_past_its_execution_end_is_allowed_only_briefly_after_a_freeze(tmp_path):
    stack = CannedStack(tmp_path)
    start = {"agenda": "a1", "operation": "first", "worker": "w1", "at": 105.0}
    stack.log_runs(start, {**start, "event": "end", "at": 120.5})
    rows = [_execution(outcome="reclaimed")]

    assert no_run_outside_its_execution(stack, rows, [Freeze("w1", 104.0, 120.0)]) == []
    late = no_run_outside_its_execution(stack, rows, [Freeze("w1", 104.0, 118.0)])
    assert late == ["operations still running after their execution ended: ['w1 first +10.50s']"]
    assert len(no_run_outside_its_execution(stack, rows, [])) == 1


def test_a_start_decided_before_a_freeze_may_land_only_just_after_the_resume(tmp_path):
    stack = CannedStack(tmp_path)
    start = {"agenda": "a1", "operation": "first", "worker": "w1", "at": 111.3}
    stack.log_runs(start, {**start, "event": "end", "at": 111.4})
    rows = [_execution(outcome="reclaimed")]

    assert no_run_outside_its_execution(stack, rows, [Freeze("w1", 104.0, 111.0)]) == []
    late = no_run_outside_its_execution(stack, rows, [Freeze("w1", 104.0, 110.5)])
    assert late == ["operations started after their execution ended: ['w1 first +1.30s']"]
    unfrozen = no_run_outside_its_execution(stack, rows, [Freeze("w2", 104.0, 111.0)])
    assert unfrozen[0] == "operations started after their execution ended: ['w1 first +1.30s']"


def test_a_run_no_execution_of_its_worker_explains_and_a_repeated_run_are_named(tmp_path):
    stack = CannedStack(tmp_path)
    run = {"agenda": "a1", "operation": "first", "worker": "w1", "at": 101.0}
    stack.log_runs(run, {**run, "at": 102.0}, {**run, "worker": "w2"})

    found = no_run_outside_its_execution(stack, [_execution()], [])

    assert found == [
        "1 run record(s) match no execution held by their worker",
        "1 operation(s) ran twice within one execution",
    ]


def test_two_overlapping_executions_of_one_agenda_are_named():
    rows = [_execution(ended=None, outcome=None), _execution(started=105.0, n=2)]

    assert never_two_open_executions(rows) == [
        "1 time(s) an agenda had two open executions",
        "1 execution(s) still open at the end",
    ]


def test_a_second_attempt_or_an_answer_lost_for_good_is_named_unless_the_fault_explains_it(
    tmp_path,
):
    stack = CannedStack(tmp_path, submitted={"k1": "a1", "k2": "a2"}, rows=[("a1", 2), ("a2", 1)])
    rows = [
        _execution("a1", outcome="reclaimed"),
        _execution("a1", started=111.0, ended=112.0, n=2),
        _execution("a2", outcome="unanswered"),
        _execution("a2", started=111.0, ended=112.0, n=2),
    ]

    found = attempts_only_for_real_failures(stack, rows, retried=set())

    assert [problem.split(":")[0] for problem in found] == [
        "1 agenda(s) used more than one attempt without a real failure",
        "1 agenda(s) were leased to nobody (a pull answer lost for good)",
    ]
    assert attempts_only_for_real_failures(stack, rows, retried={"a1", "a2"}) == []


def test_a_recovery_slower_than_5_s_and_an_html_500_are_named():
    rows = [_execution(ended=106.0)]

    assert recovered_in_time(rows, fault_ended=100.0) == [
        "the first success came 6.0 s after the fault ended"
    ]
    assert recovered_in_time(rows, fault_ended=101.5) == []
    answers = [
        Answer(1.0, "POST", "/api/v1/agendas/bulk/", 503, "application/json", "5"),
        Answer(2.0, "POST", "/api/v1/agendas/bulk/", 500, "text/html", None),
    ]
    assert error_pages(answers) == ["POST /api/v1/agendas/bulk/ -> 500 text/html retry-after=None"]
