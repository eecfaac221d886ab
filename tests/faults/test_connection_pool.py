"""A pooled web node (DATABASE_POOL_MAX_SIZE) with more threads than the database has
connection slots: the squeeze of issue 17 as it was measured — 40 long-polling pullers over
a server of max_connections = 30 — with the web node at 2 × 20 threads.

Without a pool every thread that served a request keeps a persistent connection
(CONN_MAX_AGE), 40 threads outnumber the slots, and errors outlive the pullers. With a pool
of 4 per process the node never holds more than 8 connections, whatever its threads; a thread
that finds the pool empty waits for a connection (or answers a JSON 503 after
DATABASE_POOL_TIMEOUT), and a few seconds after the pullers leave nobody gets an error.
"""

import threading
import time

import pytest

from tests.faults.invariants import error_pages, problems
from tests.faults.test_connection_squeeze import PULLERS, SETTLE_SECONDS, _long_poll

pytestmark = pytest.mark.faults

MAX_CONNECTIONS = 30
POOL = 4
WEB_WORKERS = 2
THREADS = 20
SQUEEZE_SECONDS = 8


def _web_connections(stack) -> int:
    (count,) = stack.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name = %s",
        [stack.dbname, "pop-web-pooled"],
    )[0]
    return count


def test_a_pooled_web_node_holds_its_pool_not_a_connection_per_thread_and_errors_end_with_the_crowd(
    stack,
):
    stack.postgres.set_max_connections(MAX_CONNECTIONS)
    stack.start(
        workers=2,
        threads=THREADS,
        web_env={
            "DATABASE_POOL_MAX_SIZE": str(POOL),
            "DATABASE_URL": stack.postgres.url(stack.dbname) + "?application_name=pop-web-pooled",
        },
    )
    stack.submit(60, prefix="before")
    stop = threading.Event()
    pullers = [
        threading.Thread(target=_long_poll, args=(stack, stop), daemon=True) for _ in range(PULLERS)
    ]
    for puller in pullers:
        puller.start()
    peak = 0
    squeeze_ends = time.monotonic() + SQUEEZE_SECONDS
    while time.monotonic() < squeeze_ends:
        peak = max(peak, _web_connections(stack))
        time.sleep(0.2)
    stop.set()
    for puller in pullers:
        puller.join(timeout=30)
    crowd_answers = len(stack.answers)
    fault_ended = time.time()

    time.sleep(SETTLE_SECONDS)
    quiet_from = time.time()
    stack.submit(20, prefix="after")
    stack.wait_all_terminal(timeout=60)

    print(f"peak web connections {peak} (pool {POOL} × {WEB_WORKERS} processes)")
    assert 0 < peak <= POOL * WEB_WORKERS
    assert error_pages(stack.answers) == []
    assert crowd_answers > PULLERS
    assert [a for a in stack.answers if a.at > quiet_from and a.status >= 400] == []
    assert problems(stack, fault_ended=fault_ended) == [], stack.tails()
