"""Pull answers lost on the way: the client hangs up, then asks again with the same request id.

Beside a live `pop worker`, a test-side puller leases agendas of the same insight and loses the
answers: over a raw socket it sends the pull and closes without reading (the server finishes
the pull for nobody), or with httpx it gives up after a millisecond and asks again at once
(the first pull may still be running). Each time, the repeat with the same `request_id` must be
answered with every execution leased under that id, so the puller can run them: nothing is left
leased to nobody, no agenda loses an attempt to a lost answer, and all succeed.
"""

import json
import socket
import time
import uuid

import httpx
import pytest

from tests.faults.invariants import error_pages, problems
from tests.faults.stack import RecordingTransport

pytestmark = pytest.mark.faults

LEASE_SECONDS = 3
ROUNDS = 6


def _hang_up_after_sending(stack, body: dict) -> None:
    """Send the pull and close the connection without reading a byte of the answer."""
    payload = json.dumps(body).encode()
    request = (
        f"POST /api/v1/insights/{stack.world.insight_id}/pull/ HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{stack.port}\r\n"
        f"Authorization: Token {stack.world.worker_token}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + payload
    with socket.create_connection(("127.0.0.1", stack.port), timeout=5) as raw:
        raw.sendall(request)
        raw.shutdown(socket.SHUT_RDWR)


def _give_up_at_once(client: httpx.Client, path: str, body: dict) -> None:
    try:
        client.post(path, json=body, timeout=httpx.Timeout(5.0, read=0.001))
    except httpx.TimeoutException:
        pass


def _leased_under(stack, request_id: str) -> set[str]:
    rows = stack.sql(
        "SELECT id::text FROM agendas_execution WHERE pull_request LIKE %s", [f"%:{request_id}"]
    )
    return {row[0] for row in rows}


def _run_and_report(client: httpx.Client, items: list[dict]) -> None:
    """Do the work of the pulled agendas (instantly) and report them succeeded."""
    reports = [
        {
            "execution": item["execution"]["id"],
            "lease_token": item["execution"]["lease_token"],
            "operations": [
                {"name": op["name"], "state": "succeeded", "result": {"ok": True}}
                for op in item["progress"]["operations"]
                if op["state"] != "succeeded"
            ],
            "state": "succeeded",
        }
        for item in items
    ]
    answer = client.post("/api/v1/executions/report/", json={"reports": reports})
    answer.raise_for_status()
    assert [result["status"] for result in answer.json()["results"]] == [200] * len(items)


def test_a_pull_repeated_after_its_answer_was_lost_gets_the_same_executions_and_burns_nothing(
    stack,
):
    stack.set_lease_seconds(LEASE_SECONDS)
    stack.start(workers=1, concurrency=2)
    stack.submit(60, prefix="work")
    path = f"/api/v1/insights/{stack.world.insight_id}/pull/"
    client = httpx.Client(
        base_url=stack.url,
        headers={"Authorization": f"Token {stack.world.worker_token}"},
        transport=RecordingTransport(stack.answers),
        timeout=30,
    )
    answered: dict[str, set[str]] = {}  # request id -> the executions its repeat was given
    with client:
        for round_number in range(ROUNDS):
            request_id = uuid.uuid4().hex
            body = {"count": 2, "worker": "dropper", "wait_seconds": 2, "request_id": request_id}
            if round_number % 2 == 0:
                _hang_up_after_sending(stack, body)
                time.sleep(0.5)  # the server has leased them to nobody by now
            else:
                _give_up_at_once(client, path, body)  # and ask again while it may still run
            repeat = client.post(path, json=body)
            repeat.raise_for_status()
            items = repeat.json()["agendas"]
            answered[request_id] = {item["execution"]["id"] for item in items}
            _run_and_report(client, items)

    stack.wait_all_terminal(timeout=60)
    # Every execution ever leased under a request id was in the answer to its repeat.
    assert {request: _leased_under(stack, request) for request in answered} == answered
    assert all(answered.values())
    assert problems(stack, fault_ended=None) == [], stack.tails()
    assert error_pages(stack.answers) == []
