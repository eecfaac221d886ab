"""A worker frozen (SIGSTOP) past its lease, then resumed (SIGCONT).

While it is stopped its leases (4 s) run out and the reclaimer gives its agendas to the other
worker; when it resumes, its own lease clock has lapsed, so it must start no operation for those
executions, stop what it was running at once, and a report with their old lease is refused (409)
and changes nothing. The frozen worker's agendas are the only ones allowed a second attempt
(being frozen past the lease is a real failure); the resumed worker runs new work within 5 s.
"""

import os
import signal
import time

import httpx
import pytest

from tests.faults.invariants import Freeze, error_pages, executions, problems

pytestmark = pytest.mark.faults

LEASE_SECONDS = 4


def _open_executions(stack, worker: str) -> int:
    return stack.sql(
        "SELECT count(*) FROM agendas_execution WHERE worker = %s AND outcome IS NULL", [worker]
    )[0][0]


def test_a_worker_frozen_past_its_lease_runs_nothing_more_for_it_and_its_stale_reports_are_refused(
    stack,
):
    stack.set_lease_seconds(LEASE_SECONDS)
    stack.start(workers=2)
    stack.submit(60, prefix="before")
    stack.wait_until(
        lambda: _open_executions(stack, "worker1") >= 2, timeout=30, what="worker1 holding work"
    )
    worker1 = stack.processes["worker1"]

    os.kill(worker1.pid, signal.SIGSTOP)
    frozen_at = time.time()
    try:
        stack.wait_until(
            lambda: _open_executions(stack, "worker1") == 0,
            timeout=LEASE_SECONDS + 10,
            what="worker1's executions reclaimed",
        )
        time.sleep(1.0)
    finally:
        os.kill(worker1.pid, signal.SIGCONT)
    resumed_at = time.time()
    stack.submit(20, prefix="after")

    stack.wait_all_terminal(timeout=60)
    rows = executions(stack)
    reclaimed = [
        row
        for row in rows
        if row.worker == "worker1" and row.outcome in ("reclaimed", "unanswered")
    ]
    assert reclaimed, "nothing of worker1's was reclaimed"
    retried = {row.agenda for row in reclaimed}
    assert (
        problems(
            stack,
            fault_ended=resumed_at,
            retried=retried,
            freezes=[Freeze("worker1", frozen_at, resumed_at)],
        )
        == []
    ), stack.tails()
    assert error_pages(stack.answers) == []
    # The resumed worker dropped its old executions on its own clock and went back to work.
    assert worker1.alive()
    log = worker1.log.read_text()
    assert "lost (its lease lapsed before a renewal was answered)" in log or "no longer ours" in log
    resumed_work = [
        row.ended - resumed_at
        for row in rows
        if row.worker == "worker1" and row.outcome == "succeeded" and row.ended > resumed_at
    ]
    print(f"resumed worker's first success {min(resumed_work, default=-1):.2f} s after SIGCONT")
    assert resumed_work and min(resumed_work) <= 5.0

    # A report under a reclaimed execution's lease is refused and changes nothing.
    stale = reclaimed[0]
    token, before = stack.sql(
        "SELECT e.lease_token::text, p.state || p.attempts_started || p.updated_at::text"
        " FROM agendas_execution e JOIN agendas_agendaprogress p ON p.agenda_id = e.agenda_id"
        " WHERE e.id = %s",
        [stale.id],
    )[0]
    answer = httpx.post(
        f"{stack.url}/api/v1/executions/{stale.id}/report/",
        json={"state": "failed", "message": "stale"},
        headers={
            "Authorization": f"Token {stack.world.worker_token}",
            "X-POP-Lease": token,
        },
        timeout=10,
    )
    assert answer.status_code == 409
    after = stack.sql(
        "SELECT p.state || p.attempts_started || p.updated_at::text FROM agendas_agendaprogress p"
        " WHERE p.agenda_id = %s",
        [stale.agenda],
    )[0][0]
    assert after == before
