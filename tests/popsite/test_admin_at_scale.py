"""The admin over a long history (issue 18): a changelist of a big table never counts the whole
table, reads no date range, searches through indexes and lists no link per customer
(core.admin.BigTableAdmin)."""

import re
from urllib.parse import parse_qs, urlparse

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agendas.models import Agenda
from audit.context import principal_bound
from audit.models import AuditEvent
from core.pagination import CappedCountPaginator
from tests.factories import CustomerFactory
from tests.scheduling.conftest import clone_ready_agendas

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="bulk SQL and plans: PostgreSQL"),
]

AGENDAS = 3000
CUSTOMERS = 300
AGENDA_TABLE = f'"{Agenda._meta.db_table}"'
CHANGELIST = "/admin/agendas/agenda/"
# A changelist of a big table reads none of these: full-table aggregates, date_hierarchy's
# MIN/MAX and DISTINCT date_trunc, and unindexable UPPER(col) LIKE '%term%' searches.
FORBIDDEN = re.compile(r"DATE_TRUNC|\bMIN\(|\bMAX\(|DISTINCT|UPPER\(|\bLIKE\b", re.I)
BIG_CHANGELISTS = [
    CHANGELIST,
    "/admin/agendas/agendaprogress/",
    "/admin/agendas/operationprogress/",
    "/admin/agendas/execution/",
    "/admin/agendas/readyagenda/",
    "/admin/agendas/queuedagenda/",
    "/admin/agendas/callbackdelivery/",
    "/admin/audit/auditevent/",
]


@pytest.fixture(autouse=True)
def _no_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def history(pool, submitter, submit_agenda) -> Agenda:
    """300 customers and 3,000 agendas of acme's, each with its own external id ("order-N")
    and a link id shared by a hundred ("batch-N"); analysed, as autovacuum would have."""
    CustomerFactory.create_batch(CUSTOMERS - 2, resource_pool=pool)  # with acme and farmco
    source = submit_agenda(submitter)
    clone_ready_agendas(source, AGENDAS - 1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {AGENDA_TABLE} AS a SET external_id = 'order-' || o.n, "
            f"link_id = 'batch-' || (o.n / 100) FROM (SELECT id, row_number() OVER "
            f"(ORDER BY created_at, id) AS n FROM {AGENDA_TABLE}) AS o WHERE a.id = o.id"
        )
        cursor.execute(f"ANALYZE {AGENDA_TABLE}")
    return Agenda.objects.get(pk=source.pk)


@pytest.fixture
def operator(client, staff_user):
    client.force_login(staff_user)
    return client


def _get(client, url: str, params: dict | None = None) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params or {})
    assert response.status_code == 200, url
    return response.content.decode(), [query["sql"] for query in captured.captured_queries]


def _on_agendas(queries: list[str]) -> list[str]:
    return [sql for sql in queries if AGENDA_TABLE in sql]


def _assert_bounded(queries: list[str]) -> None:
    for sql in queries:
        assert not FORBIDDEN.search(sql), sql
        if re.search(r"\bCOUNT\(", sql, re.I):
            assert f"LIMIT {CappedCountPaginator.cap + 1}" in sql, sql


def _filter_sidebar(page: str) -> str:
    match = re.search(r'<nav id="changelist-filter".*?</nav>', page, re.S)
    assert match, "no filter sidebar"
    return match.group(0)


def _rows(page: str) -> list[str]:
    """The agenda ids in the changelist's rows."""
    return re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', page)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"q": "order-1234"},
        {"q": "batch-7"},
        {"customer": "acme"},
        {"progress__state__exact": "ready"},
    ],
    ids=["plain", "external-id", "link-id", "customer", "state"],
)
def test_the_agenda_changelist_counts_at_most_the_cap_and_reads_no_dates(operator, history, params):
    page, queries = _get(operator, CHANGELIST, params)

    on_agendas = _on_agendas(queries)
    _assert_bounded(queries)
    counts = [sql for sql in on_agendas if re.search(r"\bCOUNT\(", sql, re.I)]
    assert len(counts) == 1  # the capped one; no full_result_count
    assert len(on_agendas) == 2  # that count and the page
    assert "toplinks" not in page and "created_at__year" not in page  # no date_hierarchy


def test_a_search_for_an_external_id_finds_that_agenda_only(operator, history):
    wanted = Agenda.objects.get(external_id="order-1234")

    page, _ = _get(operator, CHANGELIST, {"q": "order-1234"})

    assert _rows(page) == [str(wanted.pk)]
    assert "1 result" in page


def test_a_search_for_an_id_or_a_link_id_finds_those_agendas(operator, history):
    by_id, _ = _get(operator, CHANGELIST, {"q": str(history.pk).upper()})
    by_prefix, _ = _get(operator, CHANGELIST, {"q": str(history.pk)[:8]})
    by_link, _ = _get(operator, CHANGELIST, {"q": "batch-7"})
    nothing, queries = _get(operator, CHANGELIST, {"q": "order-99999"})

    assert _rows(by_id) == [str(history.pk)]
    assert str(history.pk) in _rows(by_prefix)
    assert all(row.startswith(str(history.pk)[:8]) for row in _rows(by_prefix))
    assert set(_rows(by_link)) == {
        str(pk) for pk in Agenda.objects.filter(link_id="batch-7").values_list("pk", flat=True)
    }
    assert len(_rows(by_link)) == 100
    assert _rows(nothing) == []


@pytest.mark.parametrize("term", ["order-1234", "batch-7", "id", "id-prefix"])
def test_the_agenda_search_reads_indexes_not_the_table(operator, history, term):
    term = {"id": str(history.pk), "id-prefix": str(history.pk)[:8]}.get(term, term)
    _, queries = _get(operator, CHANGELIST, {"q": term})

    searched = _on_agendas(queries)
    assert len(searched) == 2
    with connection.cursor() as cursor:
        for sql in searched:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert not re.search(r"Seq Scan on agendas_agenda\b", plan), plan
            assert "Index" in plan, plan


def test_the_customer_filter_is_a_text_box_not_a_link_per_customer(operator, history):
    page, queries = _get(operator, CHANGELIST)

    sidebar = _filter_sidebar(page)
    links = re.findall(r'href="([^"]*)"', sidebar)
    customers_linked = {
        value for href in links for value in parse_qs(urlparse(href).query).get("customer", [])
    }
    assert customers_linked == set()
    assert len(links) <= 25  # state, date and "All" links; none per customer or insight
    assert re.search(r'<input type="search" name="customer"', sidebar)
    assert not re.search(r"customer-\d|Customer \d", sidebar)
    # No query reads the customer table whole for the sidebar.
    assert not [
        sql for sql in queries if 'FROM "resourcepools_customer"' in sql and "WHERE" not in sql
    ]


def test_the_customer_filter_takes_a_slug_or_an_id_and_keeps_the_other_parameters(
    operator, history, customer, other_customer, other_submitter, submit_agenda
):
    theirs = submit_agenda(other_submitter)

    by_slug, _ = _get(operator, CHANGELIST, {"customer": "globex"})
    by_id, _ = _get(operator, CHANGELIST, {"customer": str(other_customer.pk)})
    unknown, _ = _get(operator, CHANGELIST, {"customer": "nobody"})
    acme, _ = _get(operator, CHANGELIST, {"customer": "acme", "progress__state__exact": "ready"})

    assert _rows(by_slug) == _rows(by_id) == [str(theirs.pk)]
    assert _rows(unknown) == []
    assert len(_rows(acme)) == 100 and str(theirs.pk) not in _rows(acme)
    sidebar = _filter_sidebar(acme)
    # The text box's form carries the other filter along; the selected slug is one link.
    assert '<input type="hidden" name="progress__state__exact" value="ready">' in sidebar
    assert re.search(r'<input type="search" name="customer" value="acme"', sidebar)
    selected = {
        value
        for href in re.findall(r'href="([^"]*)"', sidebar)
        for value in parse_qs(urlparse(href.replace("&amp;", "&")).query).get("customer", [])
    }
    assert selected == {"acme"}


def test_above_the_cap_the_page_says_more_than_and_offers_pages_up_to_it(
    operator, history, monkeypatch
):
    monkeypatch.setattr(CappedCountPaginator, "cap", 1000)

    page, queries = _get(operator, CHANGELIST)
    last_page, _ = _get(operator, CHANGELIST, {"p": "10"})
    past_it = operator.get(CHANGELIST, {"p": "11"})

    assert "more than 1000 agendas" in page
    assert "Select all matching agendas (more than 1000)" in page
    assert [sql for sql in queries if "LIMIT 1001" in sql and "COUNT(" in sql.upper()]
    assert len(_rows(last_page)) == 100
    assert past_it.status_code == 302  # the admin's "?e=1": no such page


def test_below_the_cap_the_count_is_exact(operator, history):
    page, _ = _get(operator, CHANGELIST, {"q": "batch-7"})

    assert "100 results" in page and "more than" not in page


@pytest.mark.parametrize("url", BIG_CHANGELISTS)
def test_every_big_changelist_counts_at_most_the_cap_with_or_without_a_search(
    operator, history, url
):
    for params in ({}, {"q": str(history.pk)}, {"q": "acme"}, {"customer": "acme"}):
        page, queries = _get(operator, url, params)

        _assert_bounded(queries)
        assert not re.search(r"customer-\d|Customer \d", _filter_sidebar(page))


def test_the_audit_trail_is_searched_by_username_and_filtered_by_a_typed_action(
    operator, submitter, other_submitter, submit_agenda
):
    with principal_bound(submitter.user):
        mine = submit_agenda(submitter)
    with principal_bound(other_submitter.user):
        theirs = submit_agenda(other_submitter)
    events = {
        agenda: str(AuditEvent.objects.get(action="agenda.submit", target_id=str(agenda.pk)).pk)
        for agenda in (mine, theirs)
    }
    url = "/admin/audit/auditevent/"

    by_user, queries = _get(operator, url, {"q": submitter.user.username})
    by_target, _ = _get(operator, url, {"q": str(theirs.pk)})
    by_action, _ = _get(operator, url, {"action": "agenda.submit", "customer": "globex"})

    def listed(page: str) -> list[str]:  # the trail has no actions, so no checkboxes
        return re.findall(r'href="/admin/audit/auditevent/([0-9a-f-]{36})/change/', page)

    _assert_bounded(queries)
    assert listed(by_user) == [events[mine]]
    assert listed(by_target) == [events[theirs]]
    assert listed(by_action) == [events[theirs]]
