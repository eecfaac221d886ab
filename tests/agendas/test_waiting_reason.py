"""Every non-terminal agenda says why it is not executing (GET agendas/{id}/ `waiting_reason`,
the agenda page, `pop agendas show`), and reading it costs the same with any backlog."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas import states
from agendas.models import AgendaProgress
from agendas.services import agenda_pause
from agendas.waiting import COUNT_LIMIT, waiting_reason
from scheduling import fill as fill_service
from scheduling import pull as pull_service

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


def _reason(agenda):
    return waiting_reason(
        AgendaProgress.objects.select_related("agenda__customer", "agenda__insight").get(
            agenda=agenda
        )
    )


def test_ready_agenda_names_how_many_of_its_customers_agendas_come_first(submitter, submit_agenda):
    first = submit_agenda(submitter)
    urgent = submit_agenda(submitter, priority=9)
    last = submit_agenda(submitter)

    assert _reason(urgent)["detail"]["customer_agendas_ahead"] == 0
    assert _reason(first)["detail"]["customer_agendas_ahead"] == 1
    reason = _reason(last)
    assert reason["code"] == "ready"
    assert reason["detail"]["customer_agendas_ahead"] == 2
    assert "2 of its customer's agendas come first" in reason["message"]


def test_queued_agenda_names_its_position(submitter, other_submitter, submit_agenda, insight):
    agendas = [submit_agenda(submitter), submit_agenda(other_submitter), submit_agenda(submitter)]
    fill_service.insight_fill(insight_id=insight.pk)

    positions = sorted(_reason(agenda)["detail"]["position"] for agenda in agendas)

    assert [_reason(agenda)["code"] for agenda in agendas] == ["queued"] * 3
    assert positions == [1, 2, 3]


def test_customer_at_max_executing_is_the_reason(
    submitter, submit_agenda, customer, insight, worker
):
    customer.max_executing = 1
    customer.save()
    running, waiting = submit_agenda(submitter), submit_agenda(submitter)
    fill_service.insight_fill(insight_id=insight.pk)
    pull_service.insight_pull(principal=worker.user, insight=insight, worker="w", count=5)

    assert _reason(running) is None
    reason = _reason(waiting)
    assert reason["code"] == "customer_at_max_executing"
    assert reason["detail"] == {"max_executing": 1}


def test_insight_at_execution_limit_is_the_reason(
    submitter, other_submitter, submit_agenda, insight, worker
):
    insight.execution_limit = 1
    insight.save()
    submit_agenda(submitter)
    fill_service.insight_fill(insight_id=insight.pk)
    waiting = submit_agenda(other_submitter)

    reason = _reason(waiting)

    assert reason["code"] == "insight_at_execution_limit"
    assert reason["detail"]["execution_limit"] == 1


def test_pending_paused_and_held_agendas_say_so(submitter, submit_agenda):
    later = timezone.now() + timedelta(hours=1)
    delayed = submit_agenda(submitter, run_after=later)
    held = submit_agenda(submitter, do_not_run=True)
    paused = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=paused)

    assert _reason(delayed)["code"] == "run_after"
    assert _reason(delayed)["detail"]["run_after"] == later.isoformat()
    assert _reason(held)["code"] == "do_not_run"
    assert _reason(paused)["code"] == "paused"


def test_finished_agenda_has_no_waiting_reason(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    with transaction.atomic():
        progress = AgendaProgress.objects.select_for_update().get(agenda=agenda)
        states.transition(progress, states.S.ABORTED)

    assert _reason(agenda) is None


def test_the_answer_reads_a_bounded_number_of_rows_whatever_the_backlog(
    submitter, submit_agenda, settings
):
    submit_agenda(submitter)
    last = submit_agenda(submitter)
    with CaptureQueriesContext(connection) as small:
        _reason(last)
    for _ in range(5):
        submit_agenda(submitter)
    newest = submit_agenda(submitter)
    with CaptureQueriesContext(connection) as large:
        reason = _reason(newest)

    assert len(large) == len(small)
    assert reason["detail"]["ahead_limit"] == COUNT_LIMIT
    assert all("LIMIT" in query["sql"] for query in large if "COUNT" in query["sql"])


def test_api_detail_carries_the_reason_and_the_list_does_not(
    submitter, submit_agenda, api_client_for
):
    agenda = submit_agenda(submitter, do_not_run=True)
    client = api_client_for(submitter)

    detail = client.get(f"/api/v1/agendas/{agenda.pk}/").json()
    listed = client.get("/api/v1/agendas/").json()["results"][0]

    assert detail["waiting_reason"]["code"] == "do_not_run"
    assert "waiting_reason" not in listed


def test_agenda_page_shows_the_reason(submitter, submit_agenda, client):
    agenda = submit_agenda(submitter, do_not_run=True)
    client.force_login(submitter.user)

    page = client.get(f"/agendas/{agenda.pk}/").content.decode()

    assert 'data-code="do_not_run"' in page
