"""What `after` may name and what it may cost (docs/design.md §5.1, §5.2): an agenda waits only
for agendas of its own customer; one request writes at most 1000 dependencies and resolves its
items' `after`s with a fixed number of queries; at most 100 agendas wait for one agenda; and no
delete leaves a waiter waiting for an agenda that is gone."""

import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from agendas.models import Agenda, AgendaDependency, AgendaProgress, AgendaWait
from agendas.services import agenda_abort, agenda_submit, agendas_submit_many
from agendas.states.waits import MAX_REQUEST_DEPENDENCIES, MAX_WAITERS
from resourcepools.models import Membership
from resourcepools.services import customer_delete

pytestmark = pytest.mark.django_db

Role = Membership.Role
OPERATIONS = [{"name": "probe", "type": "mediainfo"}]


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def consultant(customer, other_customer, make_principal):
    """A submitter of `customer` who is also a viewer of `other_customer`."""
    principal = make_principal(customer, Role.SUBMITTER, username="consultant")
    Membership.objects.create(user=principal.user, customer=other_customer, role=Role.VIEWER)
    return principal


def _counts() -> tuple[int, int, int]:
    return Agenda.objects.count(), AgendaWait.objects.count(), AgendaDependency.objects.count()


# --- Only the submitting customer's agendas ------------------------------------------------


def test_an_agenda_of_another_customer_the_submitter_can_see_is_refused_like_a_missing_one(
    consultant, other_submitter, submit_agenda, api_client_for
):
    foreign = submit_agenda(other_submitter)
    missing = uuid.uuid4()
    client = api_client_for(consultant)
    before = _counts()

    answers = {}
    for agenda_id in (foreign.pk, missing):
        response = client.post(
            "/api/v1/agendas/",
            {"operations": OPERATIONS, "after": {"agendas": [str(agenda_id)]}},
            format="json",
        )
        assert response.status_code == 400
        answers[agenda_id] = [
            m.replace(str(agenda_id), "ID") for m in response.json()["after.agendas"]
        ]

    assert answers[foreign.pk] == answers[missing] == ["Customer acme has no agenda with id ID."]
    assert _counts() == before


def test_a_bulk_item_naming_another_customers_agenda_fails_like_a_missing_one(
    consultant, other_submitter, submit_agenda, api_client_for
):
    foreign = submit_agenda(other_submitter)
    missing = uuid.uuid4()
    before = _counts()

    response = api_client_for(consultant).post(
        "/api/v1/agendas/bulk/",
        {
            "agendas": [
                {"operations": OPERATIONS, "after": {"agendas": [str(foreign.pk)]}},
                {"operations": OPERATIONS, "after": {"agendas": [str(missing)]}},
            ]
        },
        format="json",
    )

    assert response.status_code == 200
    first, second = (result["errors"]["after.agendas"] for result in response.json()["results"])
    assert [first[0].replace(str(foreign.pk), "ID")] == [second[0].replace(str(missing), "ID")]
    assert _counts() == before


def test_link_ids_never_reach_another_customers_agendas_even_ones_the_submitter_sees(
    consultant, other_submitter, submit_agenda
):
    submit_agenda(other_submitter, link_id="theirs")
    before = _counts()

    with pytest.raises(ValidationError) as raised:
        agenda_submit(
            principal=consultant.user, operations=OPERATIONS, after={"link_ids": ["theirs"]}
        )

    assert raised.value.message_dict == {
        "after.link_ids": ["Customer acme has no agenda with link id theirs."]
    }
    assert _counts() == before


def test_staff_submitting_for_a_customer_may_wait_only_for_that_customers_agendas(
    staff_user, customer, other_submitter, submit_agenda, insight
):
    foreign = submit_agenda(other_submitter)
    before = _counts()

    with pytest.raises(ValidationError) as raised:
        agenda_submit(
            principal=staff_user,
            customer=customer,
            operations=OPERATIONS,
            after={"agendas": [foreign.pk]},
        )

    assert list(raised.value.message_dict) == ["after.agendas"]
    assert _counts() == before


def test_the_detail_lists_only_agendas_of_the_waiters_own_customer(
    submitter, viewer, other_submitter, submit_agenda, api_client_for
):
    own = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [own.pk]})
    # A row from before the rule (or written by hand) naming another customer's agenda.
    foreign = submit_agenda(other_submitter)
    AgendaDependency.objects.create(waiter=waiter, upstream=foreign)

    detail = api_client_for(viewer).get(f"/api/v1/agendas/{waiter.pk}/").json()

    assert [row["id"] for row in detail["after"]["agendas"]] == [str(own.pk)]
    assert detail["waiting_reason"]["detail"]["agendas"] == [str(own.pk)]
    assert str(foreign.pk) not in str(detail)


# --- What one request may cost -------------------------------------------------------------


def _upstreams(principal, submit_agenda, count: int) -> list[Agenda]:
    return [submit_agenda(principal, link_id=f"up-{index}") for index in range(count)]


def _bulk_queries(principal, upstreams: list[Agenda], items: int) -> int:
    rows = [
        {
            "operations": OPERATIONS,
            "after": {
                "agendas": [upstreams[index % len(upstreams)].pk],
                "link_ids": [f"up-{(index + 1) % len(upstreams)}"],
            },
        }
        for index in range(items)
    ]
    with CaptureQueriesContext(connection) as queries:
        results = agendas_submit_many(principal=principal.user, items=rows)
    assert all(isinstance(result, Agenda) for result in results), results
    return len(queries)


def test_a_bulk_submit_with_after_costs_the_same_queries_for_10_items_as_for_100(
    submitter, submit_agenda
):
    upstreams = _upstreams(submitter, submit_agenda, 10)

    ten = _bulk_queries(submitter, upstreams, 10)
    hundred = _bulk_queries(submitter, upstreams, 100)

    # Savepoint and release, the caller's customer, the ids, the link ids, the insights, the
    # upstreams' waiters; then one INSERT each for agendas, waits, dependencies, progress,
    # operations and the audit event, with the upstreams' states read FOR SHARE between.
    assert hundred == ten == 14
    assert AgendaDependency.objects.count() == 2 * 110
    assert AgendaWait.objects.filter(remaining=2).count() == 110


def test_a_bulk_submit_whose_items_wait_for_over_1000_agendas_in_all_is_refused_whole(
    submitter, submit_agenda, api_client_for
):
    for _ in range(100):
        submit_agenda(submitter, link_id="batch")
    items = [{"operations": OPERATIONS, "after": {"link_ids": ["batch"]}} for _ in range(11)]
    before = _counts()

    with CaptureQueriesContext(connection) as queries:
        response = api_client_for(submitter).post(
            "/api/v1/agendas/bulk/", {"agendas": items}, format="json"
        )

    assert response.status_code == 400
    assert response.json() == {
        "after": [
            "This request would wait for 1100 agendas in all (every item's after counts); "
            f"one request may wait for at most {MAX_REQUEST_DEPENDENCIES}."
        ]
    }
    assert len(queries) < 20
    assert _counts() == before


def test_the_bound_of_a_request_is_checked_before_any_agenda_is_looked_up(submitter, insight):
    items = [
        {"operations": OPERATIONS, "after": {"agendas": [uuid.uuid4() for _ in range(600)]}}
        for _ in range(2)
    ]

    with CaptureQueriesContext(connection) as queries, pytest.raises(ValidationError) as raised:
        agendas_submit_many(principal=submitter.user, items=items)

    assert raised.value.message_dict["after"] == [
        "This request would wait for at least 1200 agendas in all (every item's after counts); "
        "one request may wait for at most 1000."
    ]
    named = items[0]["after"]["agendas"][0]
    assert not any(text in query["sql"] for query in queries for text in (str(named), named.hex))
    assert _counts() == (0, 0, 0)


def test_at_most_100_agendas_wait_for_one_agenda_and_the_next_is_refused_naming_it(
    submitter, submit_agenda, api_client_for
):
    upstream = submit_agenda(submitter)
    after = {"agendas": [str(upstream.pk)]}
    full = agendas_submit_many(
        principal=submitter.user,
        items=[{"operations": OPERATIONS, "after": after} for _ in range(MAX_WAITERS)],
    )
    assert len(full) == MAX_WAITERS
    before = _counts()

    response = api_client_for(submitter).post(
        "/api/v1/agendas/", {"operations": OPERATIONS, "after": after}, format="json"
    )

    assert response.status_code == 400
    [message] = response.json()["after.agendas"]
    assert message.startswith(f"At most {MAX_WAITERS} agendas may wait for one agenda at a time")
    assert str(upstream.pk) in message
    assert _counts() == before


def test_a_bulk_submit_that_would_put_over_100_waiters_on_one_agenda_writes_nothing(
    submitter, submit_agenda
):
    upstream = submit_agenda(submitter)
    items = [
        {"operations": OPERATIONS, "after": {"agendas": [upstream.pk]}}
        for _ in range(MAX_WAITERS + 1)
    ]
    before = _counts()

    with pytest.raises(ValidationError) as raised:
        agendas_submit_many(principal=submitter.user, items=items)

    assert list(raised.value.message_dict) == ["after.agendas"]
    assert _counts() == before


def test_once_the_agenda_ends_its_waiters_no_longer_count(submitter, submit_agenda):
    upstream = submit_agenda(submitter)
    agendas_submit_many(
        principal=submitter.user,
        items=[
            {"operations": OPERATIONS, "after": {"agendas": [upstream.pk]}}
            for _ in range(MAX_WAITERS)
        ],
    )
    agenda_abort(principal=submitter.user, agenda=upstream)

    late = submit_agenda(submitter, after={"agendas": [upstream.pk], "on": "completed"})

    assert AgendaProgress.objects.get(agenda=late).state == "ready"
    assert AgendaProgress.objects.filter(state="failed").count() == MAX_WAITERS


# --- Deletes -------------------------------------------------------------------------------


def test_deleting_a_customer_takes_its_waiters_with_their_upstreams_and_no_one_else_waits(
    submitter, other_submitter, submit_agenda, staff_user
):
    upstream = submit_agenda(submitter)
    submit_agenda(submitter, after={"agendas": [upstream.pk]})
    their_upstream = submit_agenda(other_submitter)
    theirs = submit_agenda(other_submitter, after={"agendas": [their_upstream.pk]})

    customer_delete(principal=staff_user, customer=submitter.customer)

    assert list(AgendaWait.objects.values_list("agenda_id", "remaining", "ended_at")) == [
        (theirs.pk, 1, None)
    ]
    assert list(AgendaDependency.objects.values_list("waiter_id", "upstream_id")) == [
        (theirs.pk, their_upstream.pk)
    ]


def test_the_admin_deletes_no_agenda_and_no_progress(submitter, submit_agenda, staff_user):
    upstream = submit_agenda(submitter)
    waiter = submit_agenda(submitter, after={"agendas": [upstream.pk]})
    client = Client()
    client.force_login(staff_user)

    pages = [
        f"/admin/agendas/agenda/{upstream.pk}/delete/",
        f"/admin/agendas/agendaprogress/{AgendaProgress.objects.get(agenda=upstream).pk}/delete/",
    ]
    answers = [client.post(page, {"post": "yes"}).status_code for page in pages]
    bulk = client.post(
        "/admin/agendas/agenda/",
        {"action": "delete_selected", "_selected_action": [str(upstream.pk)], "post": "yes"},
    )

    assert answers == [403, 403]
    assert bulk.status_code in (200, 302)
    assert Agenda.objects.filter(pk=upstream.pk).exists()
    assert AgendaDependency.objects.filter(waiter=waiter, upstream=upstream).exists()
    assert AgendaWait.objects.get(agenda=waiter).remaining == 1
