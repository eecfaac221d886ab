"""Pause, completed (docs/design.md §7.2): `mode: now` stops an executing agenda's running
operations at once (its worker is told `pause_now` and reports them waiting, params kept), a
pause not yet honoured can be withdrawn, and a bad mode changes nothing."""

import pytest

from agendas.models import AgendaProgress, OperationProgress
from core.principals import SYSTEM
from scheduling.fill import insight_fill
from scheduling.pull import insight_pull
from scheduling.report import execution_report

pytestmark = pytest.mark.django_db


@pytest.fixture
def executing(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    insight_fill(insight_id=agenda.insight_id)
    (pulled,) = insight_pull(principal=SYSTEM, insight=agenda.insight, worker="w1", count=1)
    return agenda, pulled.execution


def heartbeat(execution):
    return execution_report(execution_id=execution.pk, lease_token=execution.lease_token)


def test_pause_now_tells_the_worker_to_stop_its_running_operations(client, executing):
    agenda, execution = executing

    answer = client.post(f"/api/v1/agendas/{agenda.pk}/pause/", {"mode": "now"}, format="json")

    assert answer.status_code == 200
    assert (
        answer.json()["progress"]["pause_requested"],
        answer.json()["progress"]["pause_now"],
    ) == (
        True,
        True,
    )
    told = heartbeat(execution)
    assert (told.pause, told.pause_now) == (True, True)


def test_a_plain_pause_is_not_now_and_can_be_escalated(client, executing):
    agenda, execution = executing
    client.post(f"/api/v1/agendas/{agenda.pk}/pause/")
    assert (heartbeat(execution).pause, heartbeat(execution).pause_now) == (True, False)

    client.post(f"/api/v1/agendas/{agenda.pk}/pause/", {"mode": "now"}, format="json")

    assert heartbeat(execution).pause_now is True


def test_resume_withdraws_a_pause_not_yet_honoured_now_included(client, executing):
    agenda, execution = executing
    client.post(f"/api/v1/agendas/{agenda.pk}/pause/", {"mode": "now"}, format="json")

    answer = client.post(f"/api/v1/agendas/{agenda.pk}/resume/")

    assert answer.status_code == 200
    told = heartbeat(execution)
    assert (told.pause, told.pause_now, told.state) == (False, False, "executing")


def test_operations_stopped_by_a_pause_now_come_back_waiting_with_their_params(client, executing):
    agenda, execution = executing
    client.post(f"/api/v1/agendas/{agenda.pk}/pause/", {"mode": "now"}, format="json")

    execution_report(
        execution_id=execution.pk,
        lease_token=execution.lease_token,
        state="paused",
        operations=[
            {"name": "probe", "state": "waiting", "percent_complete": 40, "params": {"seg": 4}}
        ],
    )

    progress = AgendaProgress.objects.get(agenda=agenda)
    probe = OperationProgress.objects.get(agenda_progress=progress, name="probe")
    assert (progress.state, progress.pause_requested, progress.pause_now) == (
        "paused",
        False,
        False,
    )
    assert (probe.state, probe.params) == ("waiting", {"seg": 4})
    assert progress.attempts_completed == 0  # a pause uses no attempt


def test_a_bad_pause_mode_is_a_400_naming_mode_and_changes_nothing(client, executing, snapshot):
    agenda, _ = executing
    before = snapshot(agenda)

    answer = client.post(f"/api/v1/agendas/{agenda.pk}/pause/", {"mode": "later"}, format="json")

    assert answer.status_code == 400 and "mode" in answer.json()
    assert snapshot(agenda) == before


def test_the_agenda_page_offers_pause_now_and_it_asks_the_worker(executing, submitter):
    from django.test import Client

    agenda, execution = executing
    browser = Client()
    browser.force_login(submitter.user)
    assert "Pause now" in browser.get(f"/agendas/{agenda.pk}/").content.decode()

    browser.post(f"/agendas/{agenda.pk}/pause/", {"mode": "now"})

    told = heartbeat(execution)
    assert (told.pause, told.pause_now) == (True, True)
    assert "Pause now" not in browser.get(f"/agendas/{agenda.pk}/").content.decode()


def test_a_pause_now_by_filter_flags_the_executing_agendas(client, executing):
    from agendas.bulk_actions import agenda_action_jobs_run

    agenda, execution = executing
    job = client.post(
        "/api/v1/agendas/actions/",
        {"action": "pause", "ids": [str(agenda.pk)], "mode": "now"},
        format="json",
    ).json()

    agenda_action_jobs_run(job_id=job["id"])

    told = heartbeat(execution)
    assert (told.pause, told.pause_now) == (True, True)
