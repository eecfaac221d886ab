"""The callback outbox grows with the history (a row per announced state of every agenda with
a callback URL, until the reaper takes its agenda): its list's first page and capped count read
by index for staff and for a customer, with every documented filter, whatever the outbox holds
(docs/design.md §10.4)."""

import pytest
from django.db import connection

from agendas.models import Agenda
from scheduling.models import CallbackDelivery
from tests.query_plans import assert_list_reads_by_index, assert_no_match_reads_few_pages
from tests.scheduling.conftest import clone_ready_agendas

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
    """20,000 delivered callbacks of the customer, four for each of 5,000 agendas (an agenda
    announces a few states, so the planner sees what an outbox holds), analysed."""
    agenda = submit_agenda(submitter, link_id="show", cid="request-1")
    clone_ready_agendas(agenda, 4_999)
    table = connection.ops.quote_name(CallbackDelivery._meta.db_table)
    agendas = connection.ops.quote_name(Agenda._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (agenda_id, customer_id, link_id, cid, url, event, body, "
            "attempts, next_attempt_at, status, last_error, created_at, updated_at) "
            "SELECT a.id, a.customer_id, 'show', 'request-1', 'https://hooks.example.com/', "
            "'succeeded', '{}', 1, now(), 'delivered', '', now(), now() "
            f"FROM {agendas} a CROSS JOIN generate_series(1, 4)",
        )
        cursor.execute(f"ANALYZE {table}")
        cursor.execute(f"ANALYZE {agendas}")
    return agenda


@pytest.mark.parametrize("who", ["staff", "customer"])
def test_the_callback_list_reads_its_page_and_its_count_by_index_and_no_match_in_a_few_pages(
    who, outbox, submitter, staff_user, api_client_for
):
    caller = api_client_for(staff_user if who == "staff" else submitter)
    for query in FILTERS:
        url = f"/api/v1/callback-deliveries/{query}"
        assert_list_reads_by_index(caller, url, (OUTBOX,))
        if "nobody" in query or "0000" in query:  # filters no delivery matches
            assert_no_match_reads_few_pages(caller, url, (OUTBOX, "agendas_agenda"))


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
