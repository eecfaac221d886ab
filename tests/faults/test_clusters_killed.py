"""Every scheduler node killed (SIGKILL of both qclusters and their task workers) for 5 s.

With no cluster, pulls still fill their queue inline, so work keeps flowing; what stops is the
timed work: the ticker (promote, reclaim, the periodic fill) dies with the cluster running it.
A worker killed at the same moment leaves leases (3 s) that only the reclaimer can give back.
When the clusters come back, the timed processes must resume by themselves: the dead worker's
executions reclaimed and its agendas rerun within 5 s of the clusters running again (their
processes forked, which they do once Django is loaded), nothing lost, nothing run twice, and no
attempt burned but those of the killed worker's agendas.
"""

import time

import pytest

from tests.faults.invariants import RECOVERY_SECONDS, error_pages, executions, problems
from tests.faults.stack import join_submitter

pytestmark = pytest.mark.faults

DOWN_SECONDS = 5
LEASE_SECONDS = 3


def _open_executions(stack, worker: str) -> int:
    return stack.sql(
        "SELECT count(*) FROM agendas_execution WHERE worker = %s AND outcome IS NULL", [worker]
    )[0][0]


def test_killing_every_cluster_for_5_s_loses_nothing_and_timed_work_resumes_within_5_s(stack):
    stack.set_lease_seconds(LEASE_SECONDS)
    stack.start(workers=2, clusters=2)
    stack.submit(60, prefix="before")
    stack.wait_until(lambda: stack.succeeded() >= 8, timeout=30, what="8 agendas succeeded")
    stack.wait_until(
        lambda: _open_executions(stack, "worker2") >= 1, timeout=30, what="worker2 holding work"
    )

    for name in ("cluster1", "cluster2", "worker2"):
        stack.processes[name].kill()
    submitter = stack.submit_in_background(20, prefix="during", batch_size=2, pause=0.3)
    time.sleep(DOWN_SECONDS)
    for name in ("cluster1", "cluster2"):
        stack.start_cluster(name)
    restarted = time.time()
    # The clock starts when the clusters run again, not when their processes were spawned:
    # loading Django took 2 s on a quiet machine and up to 4 s beside the rest of the suite,
    # which measures the machine, not how the scheduler recovers.
    stack.wait_until(
        lambda: all(stack.cluster_running(name) for name in ("cluster1", "cluster2")),
        timeout=30,
        what="the restarted clusters running",
        poll=0.05,
    )
    fault_ended = time.time()
    print(f"the clusters ran again {fault_ended - restarted:.2f} s after they were started")

    join_submitter(submitter)
    stack.wait_all_terminal(timeout=90)
    rows = executions(stack)
    lost = [
        row
        for row in rows
        if row.worker == "worker2" and row.outcome in ("reclaimed", "unanswered")
    ]
    assert lost, "worker2 held nothing when it was killed"
    reclaimed_after = max(row.ended for row in lost) - fault_ended
    print(f"{len(lost)} lease(s) of the killed worker reclaimed {reclaimed_after:.2f} s after")
    assert reclaimed_after <= RECOVERY_SECONDS, f"reclaimed {reclaimed_after:.1f} s after restart"
    assert problems(stack, fault_ended=fault_ended, retried={row.agenda for row in lost}) == [], (
        stack.tails()
    )
    assert error_pages(stack.answers) == []
    assert all(stack.processes[name].alive() for name in ("cluster1", "cluster2"))
