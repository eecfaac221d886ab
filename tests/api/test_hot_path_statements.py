"""The hot path's SQL statements, pinned (issue 22): submit of 100 in bulk, pull of 10 (from a
full queue, and from a drained one that fills inline), batch report of 10, and one fill of 10.

Counted on PostgreSQL the way tests/scheduling/test_claim_one_statement.py counts: every
statement on the default connection (authentication, throttle counters, the work itself),
savepoints and transaction control left out. A change that adds a round trip to one of these
paths fails here and says which statements it now sends.
"""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agendas.models import AgendaProgress, OperationProgress
from core.statement_text import STATEMENT_CACHE_LENGTH, STATEMENT_CACHE_PARAMETERS
from scheduling.fill import insight_fill
from scheduling.models import QueuedAgenda
from scheduling.pull import insight_pull

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the pinned statements are PostgreSQL's"
    ),
]


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    # A nudge enqueues a task after commit, outside the request's statements; off, as in
    # bench/profile.py, so the counts are the request's own.
    settings.POP_FILL_NUDGE = "off"


def _statements(captured) -> list[str]:
    return [
        query["sql"]
        for query in captured.captured_queries
        # Transaction control left out: the tests run in a transaction of their own, but for
        # the pulls', which run outside one as a request does, to count its plan setting.
        if not query["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "BEGIN", "COMMIT"))
    ]


def _shapes(statements: list[str]) -> list[str]:
    """Each statement's first 12 words, for the failure message."""
    return [" ".join(sql.split()[:12]) for sql in statements]


def _assert_statements(captured, expected: int) -> list[str]:
    statements = _statements(captured)
    assert len(statements) == expected, "\n".join(_shapes(statements))
    return statements


@pytest.fixture
def submit_ready(submitter, submit_agenda):
    def submit(n: int) -> None:
        for _ in range(n):
            submit_agenda(submitter)

    return submit


@pytest.fixture
def pull_client(worker, api_client_for):
    return api_client_for(worker)


def _pull(client, insight, count: int = 10):
    response = client.post(
        f"/api/v1/insights/{insight.pk}/pull/",
        {"count": count, "worker": "w1", "wait_seconds": 0},
        format="json",
    )
    assert response.status_code == 200, response.content[:300]
    return response.json()["agendas"]


def test_a_bulk_submit_of_100_sends_12_statements(client, insight, operations):
    """Token + user (1); throttle counter (1: its upsert); the caller's
    memberships (1); its customer (1); the insights to map onto (1); one INSERT each into
    agendas, progress, operations and the ready set (4); the ready lanes' shared advisory
    locks (1) and their upsert (1); the audit event (1)."""
    body = {"agendas": [{"operations": operations}] * 100}
    client.post("/api/v1/agendas/bulk/", body, format="json")  # warm: token, throttle rows

    with CaptureQueriesContext(connection) as captured:
        response = client.post("/api/v1/agendas/bulk/", body, format="json")

    assert response.status_code == 200
    assert [item["state"] for item in response.json()["results"]] == ["ready"] * 100
    _assert_statements(captured, 12)


# The pulls run outside a test's transaction, as a request runs: the claim's transaction then
# ends with it, and the plan setting it makes for it needs no statement to set it back.
@pytest.mark.django_db(transaction=True)
def test_a_pull_of_10_from_a_full_queue_sends_5_statements(insight, submit_ready, pull_client):
    """Token + user (1); throttle counter (1); the insight with the worker's memberships (1);
    the claim's plan setting (1: its generic plan, core.prepared_statements.generic_plan);
    the claim, with the claimed agendas' operations, one statement (1)."""
    insight.queue_size = 20
    insight.save(update_fields=["queue_size"])
    submit_ready(20)
    insight_fill(insight_id=insight.pk)
    _pull(pull_client, insight, count=1)  # warm: token, throttle rows

    with CaptureQueriesContext(connection) as captured:
        pulled = _pull(pull_client, insight)

    assert len(pulled) == 10
    assert QueuedAgenda.objects.filter(insight=insight).count() == 9
    assert [operation["name"] for operation in pulled[0]["progress"]["operations"]] == [
        operation["name"] for operation in pulled[0]["agenda"]["operations"]
    ]
    _assert_statements(captured, 5)


@pytest.mark.django_db(transaction=True)
def test_a_pull_of_10_from_a_drained_queue_fills_inline_in_12_statements(
    insight, submit_ready, pull_client
):
    """The full-queue pull's 5 up to and including a claim that comes up empty, then the 6
    of a fill (see the fill's pin) moving the queue's 10 and the pull's 10, and a second claim
    with its operations (1). The queue is left full: the next pull fills nothing."""
    insight.queue_size = 10
    insight.save(update_fields=["queue_size"])
    submit_ready(40)
    insight_fill(insight_id=insight.pk)
    assert len(_pull(pull_client, insight)) == 10  # drains the queue; 30 stay ready

    with CaptureQueriesContext(connection) as captured:
        pulled = _pull(pull_client, insight)

    assert len(pulled) == 10
    assert QueuedAgenda.objects.filter(insight=insight).count() == 10
    _assert_statements(captured, 12)


def test_a_batch_report_of_10_successes_sends_5_statements(
    insight, submit_ready, worker, pull_client
):
    """Token + user (1); throttle counter (1); progress + executions locked (1); their
    operations (1); the UPDATEs of operations, executions and progress, one statement (1).
    Nothing waits for these agendas (`after`), so their finish looks for no waiters."""
    submit_ready(11)
    insight_fill(insight_id=insight.pk)
    pulled = insight_pull(principal=worker.user, insight=insight, worker="w1", count=11)

    def report(items):
        return pull_client.post(
            "/api/v1/executions/report/",
            {
                "reports": [
                    {
                        "execution": str(item.execution.pk),
                        "lease_token": str(item.execution.lease_token),
                        "operations": [
                            {"name": operation.name, "state": "succeeded"}
                            for operation in item.operations
                        ],
                        "state": "succeeded",
                    }
                    for item in items
                ]
            },
            format="json",
        )

    assert report(pulled[:1]).status_code == 200  # warm: token, throttle rows
    with CaptureQueriesContext(connection) as captured:
        response = report(pulled[1:])

    assert response.status_code == 200, response.content[:300]
    states = AgendaProgress.objects.filter(agenda__in=[item.agenda for item in pulled])
    assert set(states.values_list("state", flat=True)) == {"succeeded"}
    assert (
        OperationProgress.objects.filter(
            agenda_progress__agenda__in=[item.agenda for item in pulled[1:]]
        )
        .exclude(state="succeeded")
        .count()
        == 0
    )
    writes = _assert_statements(captured, 5)[-1]
    for table in ("agendas_operationprogress", "agendas_execution", "agendas_agendaprogress"):
        assert f'UPDATE "{table}"' in writes


def test_a_fill_moving_10_sends_6_statements(insight, submit_ready):
    """The insight's try-lock (1); its schedule info, locked, with the insight and the queue's
    length (1); the lanes with their customers' limits (1); the ready rows per lane (1); the
    progress rows locked and moved, their ready rows deleted and their queue rows inserted, in
    one statement (1); UPDATE lanes and schedule info, one statement (1)."""
    insight_fill(insight_id=insight.pk)  # warm: the insight's schedule info row
    submit_ready(10)

    with CaptureQueriesContext(connection) as captured:
        result = insight_fill(insight_id=insight.pk)

    assert result.moved == 10
    _assert_statements(captured, 6)


def test_every_statement_of_the_hot_paths_fits_the_drivers_statement_cache(
    client, insight, operations, pull_client
):
    """psycopg converts a statement's placeholders once per text only up to its cache's limits
    (core.statement_text); a statement over them is converted again on every run. A bulk
    submit of 100, a pull of 60 that fills inline, a batch report of the 60: every text and
    parameter count within (a report's executions travel as one array, not 60 parameters)."""
    sent = []

    def record(execute, sql, params, many, context):
        if params is not None:  # psycopg converts (and caches) only a statement with parameters
            sent.append((sql, params[0] if many else params))
        return execute(sql, params, many, context)

    insight.queue_size = 10
    insight.save(update_fields=["queue_size"])
    with connection.execute_wrapper(record):
        client.post(
            "/api/v1/agendas/bulk/", {"agendas": [{"operations": operations}] * 100}, format="json"
        )
        insight_fill(insight_id=insight.pk)
        pulled = _pull(pull_client, insight, count=60)  # the queue holds 10: it fills inline
        response = pull_client.post(
            "/api/v1/executions/report/",
            {
                "reports": [
                    {
                        "execution": item["execution"]["id"],
                        "lease_token": item["execution"]["lease_token"],
                        "operations": [{"name": "probe", "state": "succeeded"}],
                        "state": "succeeded",
                    }
                    for item in pulled
                ]
            },
            format="json",
        )

    assert len(pulled) == 60 and response.status_code == 200, response.content[:300]
    assert [item["ok"] for item in response.json()["results"]] == [True] * 60
    too_long = [
        f"{len(sql.encode())} characters, {len(params)} parameters: {' '.join(sql.split()[:8])}"
        for sql, params in sent
        if len(sql.encode()) > STATEMENT_CACHE_LENGTH or len(params) > STATEMENT_CACHE_PARAMETERS
    ]
    assert not too_long, "\n".join(too_long)
    texts = [" ".join(sql.split()[:3]) for sql, _ in sent]
    assert "WITH picked AS" in texts  # the claim
    assert any(sql.startswith("WITH u0 AS (UPDATE") for sql, _ in sent)  # the report's write


def test_the_statement_cache_limits_are_psycopgs_own():
    from psycopg import _queries

    assert (STATEMENT_CACHE_LENGTH, STATEMENT_CACHE_PARAMETERS) == (
        _queries.MAX_CACHED_STATEMENT_LENGTH,
        _queries.MAX_CACHED_STATEMENT_PARAMS,
    )
