"""PostgreSQL goes away under a running POP: a fast restart, and an outage of 10 s.

Two `pop worker`s run agendas while more are submitted over HTTP; the private server is
restarted (`pg_ctl restart -m fast`: every connection is cut) or stopped for 10 s. The lease
(30 s) outlasts the outage, so nothing was lost: every agenda must succeed on its first attempt,
each operation run inside its execution, clients see at most JSON 503s, and work flows again
within 5 s of the server being back.
"""

import time

import pytest

from tests.faults.invariants import error_pages, problems, recovery_seconds
from tests.faults.stack import join_submitter

pytestmark = pytest.mark.faults

OUTAGE_SECONDS = 10


def test_a_fast_postgresql_restart_mid_run_loses_nothing_and_burns_no_attempt(stack):
    stack.start(workers=2)
    stack.submit(40, prefix="before")
    stack.wait_until(lambda: stack.succeeded() >= 8, timeout=30, what="8 agendas succeeded")
    submitter = stack.submit_in_background(30, prefix="during", batch_size=3, pause=0.2)

    stack.postgres.restart("fast")
    fault_ended = time.time()

    join_submitter(submitter)
    stack.wait_all_terminal(timeout=60)
    print(f"first success {recovery_seconds(stack, fault_ended):.2f} s after the restart")
    assert problems(stack, fault_ended=fault_ended) == [], stack.tails()
    assert error_pages(stack.answers) == []


def test_a_10_second_postgresql_outage_mid_run_loses_nothing_and_work_resumes_within_5_s(stack):
    stack.start(workers=2)
    stack.submit(40, prefix="before")
    stack.wait_until(lambda: stack.succeeded() >= 8, timeout=30, what="8 agendas succeeded")
    submitter = stack.submit_in_background(30, prefix="during", batch_size=3, pause=0.5)

    stack.postgres.stop("fast")
    time.sleep(OUTAGE_SECONDS)
    stack.postgres.start()
    fault_ended = time.time()

    join_submitter(submitter)
    stack.wait_all_terminal(timeout=60)
    print(f"first success {recovery_seconds(stack, fault_ended):.2f} s after the outage")
    assert problems(stack, fault_ended=fault_ended) == [], stack.tails()
    assert error_pages(stack.answers) == []
    # Clients were told to come back later, not handed an error for work that was done.
    assert any(answer.status == 503 for answer in stack.answers)
