"""What must hold after every fault (issue 17), checked against the database and the workers' own
log of operation runs (scripts/cluster_demo.py's `demo` handler: a line at each run's start and
end, with the agenda, the operation, the worker and the wall time).

`problems(stack, ...)` returns every broken invariant as a sentence; a scenario asserts it is
empty. The invariants:

1. every submitted agenda is terminal, in the state the scenario allows (succeeded unless it
   makes failures), created once (one agenda per idempotency key, nothing else) and counted
   once (exactly one execution ended with the agenda's final outcome);
2. no agenda ever had two open executions: each began after the one before it ended;
3. no operation ran after its execution ended: every run started inside an execution its worker
   held (matched by agenda and worker: the latest one begun before the run) and before that
   execution ended (or was reclaimed), and ended before it too, unless the worker was frozen
   when its execution ended (it could not notice), and then within RESUME_GRACE of resuming
   (a start it had decided before the freeze may land within RESUME_START_GRACE of resuming);
   no operation ran twice within one execution;
4. queue rows agree with states: a ready row only for a `ready` agenda, a queued row only for a
   `queued` one;
5. attempts are burned only by real failures: one execution and one attempt for each agenda
   the scenario does not name as legitimately retried, and none of them ever leased to nobody
   (an `unanswered` execution: a pull's answer lost for good);
6. recovery: the first success after the fault ended came within RECOVERY_SECONDS.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from tests.faults.stack import Stack

CLOCK_TOLERANCE = 0.25  # the workers and PostgreSQL share this machine's clock
RESUME_GRACE = 1.0  # a frozen worker cancels what it was running this soon after resuming
# A start the worker decided, on a fresh lease, just before it was frozen lands this soon after
# it resumes: no check-then-start is atomic against SIGSTOP. Such a run must then end within
# RESUME_GRACE, like the rest.
RESUME_START_GRACE = 0.5
RECOVERY_SECONDS = 5.0


@dataclass(frozen=True)
class Freeze:
    """A worker stopped (SIGSTOP) from `start` to `end`, wall-clock seconds."""

    worker: str
    start: float
    end: float


@dataclass(frozen=True)
class ExecutionRow:
    id: str
    agenda: str
    number: int
    worker: str
    started: float
    ended: float | None
    outcome: str | None


def executions(stack: Stack) -> list[ExecutionRow]:
    rows = stack.sql(
        "SELECT id::text, agenda_id::text, number, worker, extract(epoch FROM started_at)::float8,"
        " extract(epoch FROM ended_at)::float8, outcome FROM agendas_execution"
    )
    return [ExecutionRow(*row) for row in rows]


def runs(stack: Stack) -> tuple[list[dict], list[dict]]:
    """The workers' records: (starts, ends)."""
    if not stack.runlog.exists():
        return [], []
    records = [json.loads(line) for line in stack.runlog.read_text().splitlines() if line]
    return (
        [r for r in records if r.get("event") != "end"],
        [r for r in records if r.get("event") == "end"],
    )


def problems(
    stack: Stack,
    *,
    fault_ended: float | None,
    states: Iterable[str] = ("succeeded",),
    retried: Iterable[str] = (),
    freezes: Iterable[Freeze] = (),
) -> list[str]:
    """Every invariant above that does not hold, as a sentence (empty: all hold)."""
    found: list[str] = []
    found += terminal_and_counted_once(stack, set(states))
    all_executions = executions(stack)
    found += never_two_open_executions(all_executions)
    found += no_run_outside_its_execution(stack, all_executions, list(freezes))
    found += queue_rows_agree_with_states(stack)
    found += attempts_only_for_real_failures(stack, all_executions, set(retried))
    if fault_ended is not None:
        found += recovered_in_time(all_executions, fault_ended)
    return found


def terminal_and_counted_once(stack: Stack, allowed: set[str]) -> list[str]:
    found = []
    submitted = set(stack.submitted.values())
    if len(submitted) != len(stack.submitted):
        found.append("two idempotency keys were answered with the same agenda")
    rows = stack.sql(
        "SELECT a.id::text, p.state, (SELECT count(*) FROM agendas_execution e"
        "  WHERE e.agenda_id = a.id AND e.outcome = p.state)"
        " FROM agendas_agenda a JOIN agendas_agendaprogress p ON p.agenda_id = a.id"
    )
    present = {agenda for agenda, _, _ in rows}
    if present != submitted:
        found.append(
            f"{len(submitted - present)} submitted agenda(s) missing, "
            f"{len(present - submitted)} agenda(s) nobody submitted"
        )
    bad_state = defaultdict(int)
    miscounted = 0
    for _, state, final_executions in rows:
        if state not in allowed:
            bad_state[state] += 1
        elif final_executions != 1:
            miscounted += 1
    if bad_state:
        found.append(f"agendas not in {sorted(allowed)}: {dict(bad_state)}")
    if miscounted:
        found.append(f"{miscounted} agenda(s) without exactly one execution of their outcome")
    return found


def never_two_open_executions(rows: list[ExecutionRow]) -> list[str]:
    by_agenda: dict[str, list[ExecutionRow]] = defaultdict(list)
    for row in rows:
        by_agenda[row.agenda].append(row)
    overlapping = still_open = duplicated = 0
    for attempts in by_agenda.values():
        attempts.sort(key=lambda row: (row.started, row.number))
        if len({row.number for row in attempts}) != len(attempts):
            duplicated += 1
        for before, after in zip(attempts, attempts[1:], strict=False):
            if before.ended is None or after.started < before.ended:
                overlapping += 1
        still_open += sum(1 for row in attempts if row.outcome is None)
    found = []
    if overlapping:
        found.append(f"{overlapping} time(s) an agenda had two open executions")
    if duplicated:
        found.append(f"{duplicated} agenda(s) with two executions of one number")
    if still_open:
        found.append(f"{still_open} execution(s) still open at the end")
    return found


def no_run_outside_its_execution(
    stack: Stack, rows: list[ExecutionRow], freezes: list[Freeze]
) -> list[str]:
    starts, ends = runs(stack)
    held: dict[tuple[str, str], list[ExecutionRow]] = defaultdict(list)
    for row in rows:
        held[row.agenda, row.worker].append(row)

    def execution_of(run: dict) -> ExecutionRow | None:
        begun = [
            row
            for row in held.get((run["agenda"], run["worker"]), [])
            if row.started - CLOCK_TOLERANCE <= run["at"]
        ]
        return max(begun, key=lambda row: row.started) if begun else None

    def late_of(run: dict, execution: ExecutionRow, grace: float) -> float | None:
        """How long after its execution ended this run began or ended, or None if in time: by
        the clocks' tolerance, or within `grace` of resuming if its worker was frozen when the
        execution ended (a frozen process cannot notice, nor stop a step it had begun)."""
        if execution.ended is None or run["at"] <= execution.ended + CLOCK_TOLERANCE:
            return None
        for freeze in freezes:
            if freeze.worker == run["worker"] and freeze.start <= execution.ended <= freeze.end:
                if run["at"] <= freeze.end + grace:
                    return None
        return run["at"] - execution.ended

    found = []
    unmatched, late_starts, twice = 0, [], 0
    seen: set[tuple[str, str]] = set()
    for run in starts:
        execution = execution_of(run)
        if execution is None:
            unmatched += 1
            continue
        late = late_of(run, execution, RESUME_START_GRACE)
        if late is not None:
            late_starts.append(f"{run['worker']} {run['operation']} +{late:.2f}s")
        if (execution.id, run["operation"]) in seen:
            twice += 1
        seen.add((execution.id, run["operation"]))
    late_ends = []
    for run in ends:
        execution = execution_of(run)
        if execution is None:
            unmatched += 1
            continue
        late = late_of(run, execution, RESUME_GRACE)
        if late is not None:
            late_ends.append(f"{run['worker']} {run['operation']} +{late:.2f}s")
    if unmatched:
        found.append(f"{unmatched} run record(s) match no execution held by their worker")
    if late_starts:
        found.append(f"operations started after their execution ended: {late_starts[:5]}")
    if late_ends:
        found.append(f"operations still running after their execution ended: {late_ends[:5]}")
    if twice:
        found.append(f"{twice} operation(s) ran twice within one execution")
    return found


def queue_rows_agree_with_states(stack: Stack) -> list[str]:
    (ready_wrong, queued_wrong, ready_missing) = stack.sql(
        "SELECT"
        " (SELECT count(*) FROM scheduling_readyagenda r JOIN agendas_agendaprogress p"
        "   ON p.agenda_id = r.agenda_id WHERE p.state <> 'ready'),"
        " (SELECT count(*) FROM scheduling_queuedagenda q JOIN agendas_agendaprogress p"
        "   ON p.agenda_id = q.agenda_id WHERE p.state <> 'queued'),"
        " (SELECT count(*) FROM agendas_agendaprogress p WHERE p.state = 'ready' AND NOT EXISTS"
        "   (SELECT 1 FROM scheduling_readyagenda r WHERE r.agenda_id = p.agenda_id))"
    )[0]
    found = []
    if ready_wrong or queued_wrong:
        found.append(
            f"queue rows of agendas in other states: {ready_wrong} ready, {queued_wrong} queued"
        )
    if ready_missing:
        found.append(f"{ready_missing} ready agenda(s) without a ready row")
    return found


def attempts_only_for_real_failures(
    stack: Stack, rows: list[ExecutionRow], retried: set[str]
) -> list[str]:
    """One attempt for each agenda not named `retried`, and no lease left to nobody: an
    `unanswered` execution (never reported; the server gives the agenda back without counting
    an attempt) means a pull's answer reached nobody, and its agenda waited a whole lease."""
    counted: dict[str, int] = defaultdict(int)
    unanswered: dict[str, int] = defaultdict(int)
    for row in rows:
        if row.outcome == "unanswered":
            unanswered[row.agenda] += 1
        else:
            counted[row.agenda] += 1
    started = dict(
        stack.sql("SELECT agenda_id::text, attempts_started FROM agendas_agendaprogress")
    )
    spared = set(stack.submitted.values()) - retried
    burned = sorted(a for a in spared if counted.get(a, 0) != 1 or started.get(a) != 1)
    orphaned = sorted(a for a in spared if unanswered.get(a))
    found = []
    for agendas, what in (
        (burned, "used more than one attempt without a real failure"),
        (orphaned, "were leased to nobody (a pull answer lost for good)"),
    ):
        if agendas:
            detail = [
                (agenda[:8], [(row.worker, row.outcome) for row in rows if row.agenda == agenda])
                for agenda in agendas[:3]
            ]
            found.append(f"{len(agendas)} agenda(s) {what}: {detail}")
    return found


def recovered_in_time(rows: list[ExecutionRow], fault_ended: float) -> list[str]:
    after = sorted(
        row.ended for row in rows if row.outcome == "succeeded" and row.ended > fault_ended
    )
    if not after:
        return ["no agenda succeeded after the fault ended"]
    if after[0] - fault_ended > RECOVERY_SECONDS:
        return [f"the first success came {after[0] - fault_ended:.1f} s after the fault ended"]
    return []


def recovery_seconds(stack: Stack, fault_ended: float) -> float:
    after = [r.ended for r in executions(stack) if r.outcome == "succeeded" and r.ended]
    after = [ended for ended in after if ended > fault_ended]
    return min(after) - fault_ended if after else float("inf")


def error_pages(answers: Iterable) -> list[str]:
    """Answers a client must never get: a server error other than a JSON 503 with Retry-After
    (the database is unavailable: nothing was done, ask again)."""
    bad = [
        f"{a.method} {a.path} -> {a.status} {a.content_type} retry-after={a.retry_after}"
        for a in answers
        if a.status >= 500 and not (a.status == 503 and "json" in a.content_type and a.retry_after)
    ]
    return bad[:10]
