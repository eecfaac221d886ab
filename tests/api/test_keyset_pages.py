"""Lists at any depth (docs/design.md §10.4): offsets up to 10,000, keyset pages (`?cursor=`)
beyond, and every big list's default ordering and filters read by index."""

import pytest
from django.db import connection

from agendas.models import Agenda
from core.pagination import MAX_OFFSET
from tests.query_plans import assert_list_reads_by_index, assert_no_match_reads_few_pages
from tests.scheduling.conftest import clone_ready_agendas

pytestmark = pytest.mark.django_db
postgresql_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="bulk copies and query plans are PostgreSQL's"
)


def ids_of(page) -> list[str]:
    return [row["id"] for row in page["results"]]


@postgresql_only
def test_a_client_walking_10000_agendas_by_cursor_sees_each_once_while_more_arrive(
    client, submitter, submit_agenda
):
    first = submit_agenda(submitter, link_id="walk")
    clone_ready_agendas(first, 9_999)
    expected = {str(pk) for pk in Agenda.objects.values_list("pk", flat=True)}
    seen: list[str] = []
    url = "/api/v1/agendas/?cursor=&limit=1000"
    pages = 0

    while url:
        answer = client.get(url)
        assert answer.status_code == 200, answer.json()
        page = answer.json()
        assert "count" not in page
        seen += ids_of(page)
        submit_agenda(submitter, link_id="arrived-meanwhile")  # lands in front of the cursor
        url = page["next"]
        pages += 1

    assert pages == 10
    assert len(seen) == len(set(seen)) == 10_000
    assert set(seen) == expected


@postgresql_only
def test_a_count_stops_past_the_deepest_offset_page(client, submitter, submit_agenda):
    first = submit_agenda(submitter)
    clone_ready_agendas(first, MAX_OFFSET + 5)

    answer = client.get("/api/v1/agendas/?limit=1&state=ready").json()

    assert answer["count"] == MAX_OFFSET + 1  # "more than 10,000": nothing pages past it


def test_only_orderings_an_index_serves_are_offered(client, submit_agenda, submitter):
    older, newer = submit_agenda(submitter), submit_agenda(submitter)

    by_update = client.get("/api/v1/agendas/?ordering=updated_at").json()["results"]
    by_percent = client.get("/api/v1/agenda-progress/?ordering=percent_complete").json()

    # An ordering no index serves is ignored: the list keeps its default order (newest first).
    assert [row["id"] for row in by_update] == [str(newer.pk), str(older.pk)]
    assert [row["agenda"] for row in by_percent["results"]] == [str(newer.pk), str(older.pk)]


def test_offsets_stop_at_the_cap_with_a_400_naming_offset(client, submit_agenda, submitter):
    submit_agenda(submitter)

    at_cap = client.get(f"/api/v1/agendas/?offset={MAX_OFFSET}")
    beyond = client.get(f"/api/v1/agendas/?offset={MAX_OFFSET + 1}")

    assert at_cap.status_code == 200
    assert beyond.status_code == 400
    assert "cursor" in beyond.json()["offset"][0]


def test_a_forged_cursor_is_a_400_naming_cursor(client, submit_agenda, submitter):
    submit_agenda(submitter)

    answer = client.get("/api/v1/agendas/?cursor=bz14")

    assert answer.status_code == 400
    assert "cursor" in answer.json()


@pytest.mark.parametrize("position", ["notadate", "2026-13-45", "\x00"])
@pytest.mark.parametrize("ordering", ["", "&ordering=priority"])
def test_a_cursor_whose_position_is_not_a_value_is_a_400(
    client, submit_agenda, submitter, position, ordering
):
    import base64
    from urllib.parse import urlencode

    submit_agenda(submitter)
    cursor = base64.b64encode(urlencode({"p": position}).encode()).decode()

    answer = client.get(f"/api/v1/agendas/?cursor={cursor}{ordering}")

    assert answer.status_code == 400
    assert "cursor" in answer.json()


def test_a_cursor_follows_the_chosen_ordering(client, submit_agenda, submitter):
    for priority in (3, 9, 1, 5):
        submit_agenda(submitter, priority=priority)

    first = client.get("/api/v1/agendas/?cursor=&limit=2&ordering=priority").json()
    second = client.get(first["next"]).json()

    priorities = [row["priority"] for row in first["results"] + second["results"]]
    assert priorities == [1, 3, 5, 9]
    assert second["next"] is None


def test_offset_pages_point_to_no_page_past_the_cap(client, submit_agenda, submitter):
    for _ in range(3):
        submit_agenda(submitter)

    answer = client.get(f"/api/v1/agendas/?offset={MAX_OFFSET - 1}&limit=1").json()

    assert answer["next"] is None


# --- every big list reads by index ----------------------------------------------------------

LISTS = [
    "/api/v1/agendas/",
    "/api/v1/agendas/?state=ready",
    "/api/v1/agendas/?link_id=deep",
    "/api/v1/agendas/?label=batch:7",
    "/api/v1/agendas/?cursor=",
    "/api/v1/agendas/?ordering=priority",
    "/api/v1/agendas/?ordering=-priority",
    "/api/v1/agenda-progress/",
    "/api/v1/agenda-progress/?state=ready",
    "/api/v1/agenda-progress/?cid=nobody",
    "/api/v1/operation-progress/",
    "/api/v1/operation-progress/?state=waiting",
    "/api/v1/operation-progress/?state=aborted",  # nobody: the count must not read everything
    "/api/v1/operation-progress/?name=a",
    "/api/v1/operation-progress/?type=nobody",  # a type nobody runs: no scan to find that out
    "/api/v1/operation-progress/?cid=nobody",
]
BIG_TABLES = (
    "agendas_agenda",
    "agendas_agendaprogress",
    "agendas_operationprogress",
    "agendas_execution",
)


@pytest.fixture
def history(submitter, submit_agenda):
    """20,000 agendas of one customer (each with its progress and operations), analysed."""
    source = submit_agenda(submitter, link_id="deep", labels={"batch": "7"})
    clone_ready_agendas(source, 19_999)
    with connection.cursor() as cursor:
        for table in BIG_TABLES:
            cursor.execute(f"ANALYZE {table}")


@postgresql_only
@pytest.mark.parametrize("who", ["staff", "customer"])
def test_every_big_list_reads_its_first_page_and_its_count_by_index_and_no_match_in_a_few_pages(
    who, history, client, staff_user, api_client_for
):
    caller = api_client_for(staff_user) if who == "staff" else client
    for url in LISTS:
        read = assert_list_reads_by_index(caller, url, BIG_TABLES)
        counts = [sql for sql in read if sql.startswith("SELECT COUNT(*) FROM (")]
        # A count reads at most the deepest offset page's rows, whatever the history.
        assert all(f"LIMIT {MAX_OFFSET + 1}" in sql for sql in counts), (url, counts)
        if "nobody" in url or "aborted" in url:  # filters no agenda matches
            assert_no_match_reads_few_pages(caller, url, BIG_TABLES)
