"""The callback outbox grows with the history (a row per announced state of every agenda with
a callback URL, until the reaper takes its agenda): its list's first page and capped count read
by index for staff and for a customer, with every documented filter, whatever the outbox holds
(docs/design.md §10.4)."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduling.models import CallbackDelivery

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="query plans are PostgreSQL's"),
]

OUTBOX = "scheduling_callbackdelivery"
FILTERS = [
    "",
    "?link_id=nobody",
    "?cid=nobody",
    "?event=nobody",
    "?status=failed",
    "?status=pending",
    "?agenda=00000000-0000-0000-0000-000000000000",
    "?customer=00000000-0000-0000-0000-000000000000",
]


@pytest.fixture
def outbox(submitter, submit_agenda):
    """20,000 delivered callbacks of one agenda of the customer, analysed."""
    agenda = submit_agenda(submitter, link_id="show", cid="request-1")
    table = connection.ops.quote_name(CallbackDelivery._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (agenda_id, customer_id, link_id, cid, url, event, body, "
            "attempts, next_attempt_at, status, last_error, created_at, updated_at) "
            "SELECT %s, %s, 'show', 'request-1', 'https://hooks.example.com/', 'succeeded', "
            "'{}', 1, now(), 'delivered', '', now(), now() FROM generate_series(1, 20000)",
            [agenda.pk, agenda.customer_id],
        )
        cursor.execute(f"ANALYZE {table}")
    return agenda


def plan_of(sql: str, *, seqscan: bool) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        if not seqscan:  # the plan PostgreSQL would take were the matching rows rare
            cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize("who", ["staff", "customer"])
def test_the_callback_list_reads_its_page_and_its_count_by_index_with_any_filter(
    who, outbox, submitter, staff_user, api_client_for
):
    caller = api_client_for(staff_user if who == "staff" else submitter)
    for query in FILTERS:
        url = f"/api/v1/callback-deliveries/{query}"
        with CaptureQueriesContext(connection) as queries:
            assert caller.get(url).status_code == 200, url
        read = [q["sql"] for q in queries if OUTBOX in q["sql"] and " LIMIT " in q["sql"]]
        assert read, url
        for sql in read:
            counted = sql.startswith("SELECT COUNT(*)")
            plan = plan_of(sql, seqscan=not counted)
            assert f"Seq Scan on {OUTBOX}" not in plan, f"{url} ({who}):\n{sql}\n{plan}"


def test_the_callback_list_by_cid_is_the_outbox_of_the_agendas_of_that_request(
    outbox, submitter, submit_agenda, api_client_for
):
    other = submit_agenda(submitter, cid="request-2")
    CallbackDelivery.objects.create(
        agenda=other,
        customer_id=other.customer_id,
        cid="request-2",
        url="https://hooks.example.com/",
        event="succeeded",
        body={},
        next_attempt_at=other.created_at,
    )

    answer = api_client_for(submitter).get("/api/v1/callback-deliveries/?cid=request-2").json()

    assert [(row["agenda"], row["cid"]) for row in answer["results"]] == [
        (str(other.pk), "request-2")
    ]
