"""Submission bounds through the API: max_attempts is 1–20 (docs/design.md §3, §5.1)."""

import pytest

from agendas.models import Agenda, AgendaProgress, OperationProgress
from scheduling.models import ReadyAgenda
from tests.factories import AgendaTemplateFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def api(submitter, insight, api_client_for):
    return api_client_for(submitter)


def _nothing_written() -> bool:
    return not (
        Agenda.objects.exists()
        or AgendaProgress.objects.exists()
        or OperationProgress.objects.exists()
        or ReadyAgenda.objects.exists()
    )


@pytest.mark.parametrize("max_attempts", [0, 21, -1])
def test_max_attempts_out_of_range_is_400_on_the_field_and_writes_nothing(
    api, operations, max_attempts
):
    response = api.post(
        "/api/v1/agendas/",
        {"operations": operations, "max_attempts": max_attempts},
        format="json",
    )

    assert (response.status_code, list(response.json())) == (400, ["max_attempts"])
    assert _nothing_written()


@pytest.mark.parametrize("max_attempts", [1, 20])
def test_max_attempts_at_the_bounds_is_accepted(api, operations, max_attempts):
    response = api.post(
        "/api/v1/agendas/",
        {"operations": operations, "max_attempts": max_attempts},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["max_attempts"] == max_attempts
    assert Agenda.objects.get(pk=response.json()["id"]).max_attempts == max_attempts


def test_bulk_refuses_an_out_of_range_item_on_its_own(api, operations):
    response = api.post(
        "/api/v1/agendas/bulk/",
        {
            "agendas": [
                {"operations": operations, "max_attempts": 0},
                {"operations": operations, "max_attempts": 20},
                {"operations": operations, "max_attempts": 21},
            ]
        },
        format="json",
    )

    assert response.status_code == 200
    results = response.json()["results"]
    assert list(results[0]["errors"]) == ["max_attempts"]
    assert list(results[2]["errors"]) == ["max_attempts"]
    assert [str(pk) for pk in Agenda.objects.values_list("pk", flat=True)] == [results[1]["id"]]


def test_template_run_refuses_max_attempts_out_of_range(api, customer, operations):
    template = AgendaTemplateFactory(customer=customer, agenda={"operations": operations})
    url = f"/api/v1/agenda-templates/{template.pk}/run/"

    refused = [api.post(url, {"payload": {}, "max_attempts": n}, format="json") for n in (0, 21)]
    accepted = api.post(url, {"payload": {}, "max_attempts": 20}, format="json")

    assert [(r.status_code, list(r.json())) for r in refused] == [(400, ["max_attempts"])] * 2
    assert accepted.status_code == 201
    assert list(Agenda.objects.values_list("max_attempts", flat=True)) == [20]
