"""Connections squeezed: PostgreSQL at max_connections = 30, most of them taken by another
client, while 40 pullers long-poll.

The web node is sized by the documented budget (docs/deploy.md: 2 × (8 + 1) + a cluster's 7 =
25 connections at most, under the server's 27 ordinary slots); for 10 s another client of the
database holds 20 of those slots and 40 pullers long-poll, so POP runs short of connections
while two `pop worker`s run agendas. Every API answer must be a success or a JSON 503 with
Retry-After (the database refused a connection: nothing was done), never an HTML 500; a few
seconds after the squeeze ends nobody gets an error at all, and every agenda succeeds on its
first attempt.
"""

import re
import threading
import time
from datetime import datetime

import httpx
import psycopg
import pytest

from tests.faults.invariants import error_pages, problems
from tests.faults.stack import RecordingTransport

pytestmark = pytest.mark.faults

MAX_CONNECTIONS = 30
PULLERS = 40
HOGGED = 20  # connections another client holds during the squeeze
SQUEEZE_SECONDS = 10
SETTLE_SECONDS = 3  # "a few seconds after the pullers leave"
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) WARNING")


def _long_poll(stack, stop: threading.Event) -> None:
    with httpx.Client(
        base_url=stack.url,
        headers={"Authorization": f"Token {stack.world.worker_token}"},
        transport=RecordingTransport(stack.answers),
        timeout=30,
    ) as client:
        while not stop.is_set():
            try:
                answer = client.post(
                    f"/api/v1/insights/{stack.idle_insight}/pull/",
                    json={"count": 1, "worker": "squeezer", "wait_seconds": 2},
                )
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            if answer.status_code == 503:
                time.sleep(0.5)  # sooner than Retry-After asks: keep the pressure on


def _take_connections(stack, most: int) -> list[psycopg.Connection]:
    """Up to `most` idle connections as another client of POP's role, until the server is full."""
    taken = []
    for _ in range(most):
        try:
            taken.append(
                psycopg.connect(stack.postgres.dsn(stack.dbname, user="pop"), autocommit=True)
            )
        except psycopg.OperationalError:
            break
    return taken


def _warnings_after(path, moment: float) -> list[str]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        match = LOG_TIME.match(line)
        if match:
            stamp = datetime.strptime(match.group(1) + "000", "%Y-%m-%d %H:%M:%S,%f")
            if stamp.timestamp() > moment:
                found.append(line[:200])
    return found


def test_40_long_pollers_short_of_connections_get_json_503s_at_worst_and_no_errors_after(
    stack,
):
    stack.postgres.set_max_connections(MAX_CONNECTIONS)
    stack.start(workers=2, threads=8)
    stack.submit(60, prefix="before")
    hog = _take_connections(stack, HOGGED)
    stop = threading.Event()
    pullers = [
        threading.Thread(target=_long_poll, args=(stack, stop), daemon=True) for _ in range(PULLERS)
    ]
    for puller in pullers:
        puller.start()
    peak = 0
    squeeze_ends = time.monotonic() + SQUEEZE_SECONDS
    while time.monotonic() < squeeze_ends:
        (count,) = stack.sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [stack.dbname]
        )[0]
        peak = max(peak, count)
        time.sleep(0.2)
    stop.set()
    for connection in hog:
        connection.close()
    for puller in pullers:
        puller.join(timeout=30)
    squeezed_answers = len(stack.answers)
    fault_ended = time.time()

    time.sleep(SETTLE_SECONDS)
    quiet_from = time.time()
    stack.submit(20, prefix="after")
    stack.wait_all_terminal(timeout=60)

    unavailable = sum(1 for answer in stack.answers if answer.status == 503)
    print(
        f"{len(hog)} connections taken, peak {peak}, "
        f"{unavailable} JSON 503s of {squeezed_answers} answers"
    )
    assert error_pages(stack.answers) == []
    assert squeezed_answers > PULLERS  # the pullers were served (or told to come back)
    # The server was full: it refused connections (JSON 503s), or was seen at its limit.
    assert unavailable > 0 or peak >= MAX_CONNECTIONS - 3, "nothing was squeezed"
    late = [a for a in stack.answers if a.at > quiet_from and a.status >= 400]
    assert late == []
    for name in ("worker1", "worker2"):
        assert _warnings_after(stack.processes[name].log, quiet_from) == []
    assert problems(stack, fault_ended=fault_ended) == [], stack.tails()
