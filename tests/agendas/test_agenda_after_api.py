"""`after` through the API: submit (one and bulk), the agenda's detail, and refusals that name
the field and change nothing (docs/design.md §5.1, §6.5)."""

import pytest

from agendas.models import Agenda, AgendaDependency, AgendaProgress, AgendaWait

pytestmark = pytest.mark.django_db

OPERATIONS = [{"name": "probe", "type": "mediainfo"}]


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


def test_submit_with_after_answers_pending_and_the_detail_shows_the_wait(
    submitter, submit_agenda, api_client_for
):
    upstream = submit_agenda(submitter)
    client = api_client_for(submitter)

    response = client.post(
        "/api/v1/agendas/",
        {"operations": OPERATIONS, "after": {"agendas": [str(upstream.pk)]}},
        format="json",
    )

    assert response.status_code == 201, response.json()
    assert response.json()["state"] == "pending"
    detail = client.get(f"/api/v1/agendas/{response.json()['id']}/").json()
    assert detail["waiting_reason"]["code"] == "waiting_for_agendas"
    assert detail["waiting_reason"]["detail"]["agendas"] == [str(upstream.pk)]
    after = detail["after"]
    assert (after["on"], after["on_failure"], after["total"], after["remaining"]) == (
        "succeeded",
        "fail",
        1,
        1,
    )
    assert after["agendas"] == [{"id": str(upstream.pk), "state": "ready", "finished": False}]
    assert after["ended_at"] is None


def test_detail_of_an_agenda_submitted_without_after_has_none(
    submitter, submit_agenda, api_client_for
):
    agenda = submit_agenda(submitter)

    detail = api_client_for(submitter).get(f"/api/v1/agendas/{agenda.pk}/").json()

    assert detail["after"] is None


def test_submit_after_another_customers_agenda_is_400_like_a_missing_one(
    submitter, other_submitter, submit_agenda, api_client_for
):
    foreign = submit_agenda(other_submitter)
    before = Agenda.objects.count()

    response = api_client_for(submitter).post(
        "/api/v1/agendas/",
        {"operations": OPERATIONS, "after": {"agendas": [str(foreign.pk)]}},
        format="json",
    )

    assert response.status_code == 400
    assert response.json()["after.agendas"] == [
        f"Customer acme has no agenda with id {foreign.pk}."
    ]
    assert Agenda.objects.count() == before
    assert AgendaWait.objects.count() == AgendaDependency.objects.count() == 0


@pytest.mark.parametrize(
    ("after", "field"),
    [
        ({"agendas": ["nope"]}, "after.agendas.0"),
        ({"on": "later"}, "after.on"),
        ({"link_ids": "batch"}, "after.link_ids"),
        ({"link_ids": ["x"] * 101}, "after.link_ids"),
        ({}, "after"),
        ({"agendas": [], "then": "x"}, "after.non_field_errors"),
    ],
)
def test_bad_after_is_400_naming_the_field(submitter, insight, api_client_for, after, field):
    response = api_client_for(submitter).post(
        "/api/v1/agendas/", {"operations": OPERATIONS, "after": after}, format="json"
    )

    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert Agenda.objects.count() == 0


def test_bulk_items_wait_each_for_their_own_agendas_and_fail_on_their_own(
    submitter, submit_agenda, api_client_for
):
    upstream = submit_agenda(submitter)

    response = api_client_for(submitter).post(
        "/api/v1/agendas/bulk/",
        {
            "agendas": [
                {"operations": OPERATIONS, "after": {"agendas": [str(upstream.pk)]}},
                {"operations": OPERATIONS},
                {"operations": OPERATIONS, "after": {"link_ids": ["nothing-here"]}},
            ]
        },
        format="json",
    )

    assert response.status_code == 200, response.json()
    first, second, third = response.json()["results"]
    assert (first["state"], second["state"]) == ("pending", "ready")
    assert "after.link_ids" in third["errors"]
    assert AgendaProgress.objects.get(agenda_id=first["id"]).message == "waiting for 1 agenda"
    assert list(AgendaDependency.objects.values_list("waiter_id", "upstream_id")) == [
        (Agenda.objects.get(pk=first["id"]).pk, upstream.pk)
    ]
