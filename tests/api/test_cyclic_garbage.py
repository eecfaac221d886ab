"""A pull and its batch report, and a bulk submit, leave their rows' instances to reference
counting, not to the cyclic collector (core/rows.relate_one_way, cache_reverse_one_way); a
pull leaves nothing to it at all (core/api._let_go drops the references by which request,
view and response hold one another once the answer is sent), a bulk submit only its item
serializer's fields (core/api.request_context).

Each pulled or reported progress row is loaded with its agenda. Set through the one-to-one
field's descriptor, the agenda also caches the progress in return: a cycle, so every pair and
what hangs on it (executions, customers, insights, their states and values) stayed in memory
until a collection found it, and each collection holds the worker's threads. A young
collection walks what is in it then: fewer objects in cycles, shorter pauses.
"""

import gc
import io
import json
from collections import Counter

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.db import connection
from django.db.models import Model

from accounts.services import token_issue
from core.principals import SYSTEM
from scheduling.fill import insight_fill

pytestmark = [
    pytest.mark.django_db,
    # The claim's and the report's one-statement forms load the rows (core/rows.py); the
    # portable forms go through the ORM.
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the hot paths' row loaders"),
]


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


def _left_in_cycles(run) -> list:
    """The objects `run` left for the cyclic collector."""
    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
    finally:
        gc.set_debug(0)
        gc.enable()
    left = list(gc.garbage)
    gc.garbage.clear()
    return left


def _models_left_in_cycles(run) -> Counter[str]:
    """Model instances `run` left for the cyclic collector, by class name."""
    return Counter(
        type(found).__name__
        for found in _left_in_cycles(run)
        # not isinstance: it would evaluate lazy objects
        if issubclass(type(found), Model)
    )


def _post_through(handler: WSGIHandler, path: str, token: str, payload: dict) -> dict:
    """POST `payload` to `path` through Django's own handler, as gunicorn calls it (the test
    client keeps the request and the response on purpose); the answer, after it is closed."""
    body = json.dumps(payload).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SERVER_NAME": "testserver",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_AUTHORIZATION": f"Token {token}",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.url_scheme": "http",
    }
    statuses = []
    answer = handler(environ, lambda status, headers, exc_info=None: statuses.append(status))
    content = b"".join(answer)
    answer.close()
    assert statuses == ["200 OK"], content[:300]
    return json.loads(content)


def test_a_pull_of_10_and_its_batch_report_leave_no_agenda_or_progress_in_a_cycle(
    insight, submitter, submit_agenda, worker, api_client_for
):
    for _ in range(12):
        submit_agenda(submitter)
    insight_fill(insight_id=insight.pk)
    client = api_client_for(worker)

    def pull_and_report(count: int) -> None:
        pulled = client.post(
            f"/api/v1/insights/{insight.pk}/pull/",
            {"count": count, "worker": "w1", "wait_seconds": 0},
            format="json",
        ).json()["agendas"]
        assert len(pulled) == count
        answer = client.post(
            "/api/v1/executions/report/",
            {
                "reports": [
                    {
                        "execution": item["execution"]["id"],
                        "lease_token": item["execution"]["lease_token"],
                        "operations": [
                            {"name": operation["name"], "state": "succeeded"}
                            for operation in item["progress"]["operations"]
                        ],
                        "state": "succeeded",
                    }
                    for item in pulled
                ]
            },
            format="json",
        )
        assert [result["ok"] for result in answer.json()["results"]] == [True] * count

    pull_and_report(2)  # warm: the token, the throttle counter, the statements

    left = _models_left_in_cycles(lambda: pull_and_report(10))

    per_row = ("Agenda", "AgendaProgress", "Execution", "Customer")
    assert {name: left[name] for name in per_row if name in left} == {}
    # At most the pulled insight, which the test client's request keeps with its own cycle
    # (the view and its request); before, also one per reported row.
    assert left.get("Insight", 0) <= 1


# The handler ends each request with `request_finished`, which closes the connection: a test
# inside a transaction would lose it.
@pytest.mark.django_db(transaction=True)
def test_a_pull_through_the_wsgi_handler_leaves_nothing_for_the_cyclic_collector(
    insight, submitter, submit_agenda, worker
):
    # Django's own handler, as gunicorn calls it: the test client keeps the request and the
    # response on purpose. Before core.api._let_go a pull left ~100 objects in cycles: the
    # request, the view and the response holding one another, with the body and the answer.
    for _ in range(3):
        submit_agenda(submitter)
    insight_fill(insight_id=insight.pk)
    handler = WSGIHandler()
    token = token_issue(principal=SYSTEM, user=worker.user, name="w").key

    def pull() -> None:
        answer = _post_through(
            handler,
            f"/api/v1/insights/{insight.pk}/pull/",
            token,
            {"count": 1, "worker": "w1", "wait_seconds": 0},
        )
        assert len(answer["agendas"]) == 1

    pull()  # warm: the token, the throttle counter, the statements

    left = _left_in_cycles(pull)

    assert sorted({type(found).__name__ for found in left}) == []


@pytest.mark.django_db(transaction=True)
def test_a_bulk_submit_leaves_no_agenda_in_a_cycle_and_what_it_leaves_does_not_grow_with_it(
    insight, submitter, operations
):
    # Each agenda was written and answered with its progress related both ways (the answer
    # reads `agenda.progress`): 2,218 objects in cycles for a bulk of 100, 22 an agenda. What
    # is left is the request's own: the item serializer bound to it (DRF's fields name their
    # parent), through its context the request, the same for 10 agendas as for 100.
    handler = WSGIHandler()
    token = token_issue(principal=SYSTEM, user=submitter.user, name="s").key

    def submit(count: int) -> None:
        body = {"agendas": [{"operations": operations}] * count}
        answer = _post_through(handler, "/api/v1/agendas/bulk/", token, body)
        assert [result["state"] for result in answer["results"]] == ["ready"] * count

    submit(2)  # warm

    left_by_ten = _left_in_cycles(lambda: submit(10))
    left_by_hundred = _left_in_cycles(lambda: submit(100))

    kinds = {type(found).__name__ for found in left_by_hundred}
    assert kinds & {"Agenda", "AgendaProgress", "Customer", "Insight"} == set()
    assert len(left_by_hundred) == len(left_by_ten)
