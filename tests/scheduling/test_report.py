"""Report (docs/design.md §6.4): sparse progress, roll-up, lease renewal, outcomes, refusals,
batches."""

import json
import logging
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from agendas.models import AgendaProgress, Execution, OperationProgress
from agendas.services import agenda_abort
from scheduling.models import CallbackDelivery

pytestmark = pytest.mark.django_db


def _report_url(execution) -> str:
    return f"/api/v1/executions/{execution.pk}/report/"


def _snapshot(agenda) -> tuple:
    progress = AgendaProgress.objects.get(agenda=agenda)
    operations = list(
        OperationProgress.objects.filter(agenda_progress=progress)
        .order_by("position")
        .values_list("name", "state", "percent_complete", "result", "params")
    )
    executions = list(
        Execution.objects.filter(agenda=agenda).values_list(
            "pk", "outcome", "lease_expires_at", "last_report_at"
        )
    )
    return (
        progress.state,
        progress.percent_complete,
        progress.message,
        progress.diagnostics,
        operations,
        executions,
        CallbackDelivery.objects.filter(agenda=agenda).count(),
    )


def test_progress_report_updates_operations_rolls_up_percent_and_renews_the_lease(
    submitter, run_one, insight, three_operations, api_client_for
):
    pulled = run_one(submitter, insight, operations=three_operations)
    later = timezone.now() + timedelta(seconds=30)

    with time_machine.travel(later, tick=False):
        response = api_client_for(submitter).post(
            _report_url(pulled.execution),
            {
                "message": "measuring",
                "operations": [
                    {"name": "probe", "state": "succeeded", "result": {"size": 7}},
                    {"name": "MEASURE", "state": "executing", "percent_complete": 50},
                ],
            },
            format="json",
            HTTP_X_POP_LEASE=str(pulled.execution.lease_token),
        )

    assert response.status_code == 200
    expires = later + timedelta(seconds=insight.lease_seconds)
    assert response.json() == {
        "abort": False,
        "pause": False,
        "pause_now": False,
        "lease_expires_at": expires.isoformat().replace("+00:00", "Z"),
        "state": "executing",
    }
    progress = AgendaProgress.objects.get(agenda=pulled.agenda)
    assert (progress.state, progress.message, progress.percent_complete) == (
        "executing",
        "measuring",
        50.0,  # (1 × 100 + 50) / 3
    )
    operations = {op.name: op for op in OperationProgress.objects.filter(agenda_progress=progress)}
    assert (operations["probe"].state, operations["probe"].result) == ("succeeded", {"size": 7})
    assert (operations["measure"].state, operations["measure"].attempt_count) == ("executing", 1)
    execution = Execution.objects.get(pk=pulled.execution.pk)
    assert (execution.lease_expires_at, execution.last_report_at) == (expires, later)


def test_empty_report_is_a_heartbeat(submitter, run_one, insight, report):
    pulled = run_one(submitter, insight)

    answer = report(pulled)

    assert (answer.abort, answer.pause, answer.state) == (False, False, "executing")
    assert Execution.objects.get(pk=pulled.execution.pk).last_report_at is not None


def test_success_report_ends_the_execution_and_logs_one_completion_line(
    submitter, run_one, insight, report, caplog, django_capture_on_commit_callbacks
):
    pulled = run_one(submitter, insight, link_id="batch-7", callback_url="https://h.example/x")

    with (
        caplog.at_level(logging.INFO, logger="pop.agendas"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        answer = report(
            pulled, state="succeeded", operations=[{"name": "probe", "state": "succeeded"}]
        )

    assert (answer.state, answer.lease_expires_at) == ("succeeded", None)
    progress = AgendaProgress.objects.get(agenda=pulled.agenda)
    assert (progress.state, progress.percent_complete, progress.attempts_completed) == (
        "succeeded",
        100.0,
        1,
    )
    execution = Execution.objects.get(pk=pulled.execution.pk)
    assert execution.outcome == "succeeded"
    assert execution.ended_at is not None
    events = list(
        CallbackDelivery.objects.filter(agenda=pulled.agenda)
        .order_by("id")
        .values_list("event", flat=True)
    )
    assert events == ["executing", "succeeded"]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "pop.agendas"]
    assert len(lines) == 1
    assert lines[0] | {"elapsed": None} == {
        "event": "agenda_completed",
        "cid": pulled.agenda.cid,
        "agenda": str(pulled.agenda.pk),
        "link_id": "batch-7",
        "customer": "acme",
        "outcome": "succeeded",
        "attempts": 1,
        "elapsed": None,
    }
    assert lines[0]["elapsed"] >= 0


def test_with_the_log_above_info_a_completion_writes_no_line_and_waits_on_no_commit(
    submitter, run_one, insight, report, caplog, django_capture_on_commit_callbacks
):
    pulled = run_one(submitter, insight)

    with (
        caplog.at_level(logging.WARNING, logger="pop.agendas"),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        answer = report(pulled, state="succeeded")

    assert answer.state == "succeeded"
    assert AgendaProgress.objects.get(agenda=pulled.agenda).state == "succeeded"
    assert [r for r in caplog.records if r.name == "pop.agendas"] == []
    assert [c.__qualname__ for c in callbacks if "Logger.info" in c.__qualname__] == []


def test_unknown_operation_is_400_and_changes_nothing(submitter, run_one, insight, api_client_for):
    pulled = run_one(submitter, insight)
    before = _snapshot(pulled.agenda)

    response = api_client_for(submitter).post(
        _report_url(pulled.execution),
        {
            "message": "x",
            "operations": [{"name": "probe", "state": "succeeded"}, {"name": "nope"}],
        },
        format="json",
        HTTP_X_POP_LEASE=str(pulled.execution.lease_token),
    )

    assert response.status_code == 400
    assert "operations.1.name" in response.json()
    assert _snapshot(pulled.agenda) == before


@pytest.mark.parametrize("lease", [None, "wrong", "00000000-0000-0000-0000-000000000000"])
def test_missing_or_wrong_lease_is_403_and_changes_nothing(
    lease, submitter, run_one, insight, api_client_for
):
    pulled = run_one(submitter, insight)
    before = _snapshot(pulled.agenda)
    headers = {} if lease is None else {"HTTP_X_POP_LEASE": lease}

    response = api_client_for(submitter).post(
        _report_url(pulled.execution), {"state": "succeeded"}, format="json", **headers
    )

    assert response.status_code == 403
    assert _snapshot(pulled.agenda) == before


def test_report_for_a_finished_execution_is_409_and_changes_nothing(
    submitter, run_one, insight, report, api_client_for
):
    pulled = run_one(submitter, insight)
    report(pulled, state="succeeded")
    before = _snapshot(pulled.agenda)

    response = api_client_for(submitter).post(
        _report_url(pulled.execution),
        {"state": "failed", "message": "late"},
        format="json",
        HTTP_X_POP_LEASE=str(pulled.execution.lease_token),
    )

    assert response.status_code == 409
    assert response.json()["current_state"] == "succeeded"
    assert _snapshot(pulled.agenda) == before


def test_report_for_a_missing_execution_is_404(submitter, api_client_for):
    response = api_client_for(submitter).post(
        "/api/v1/executions/00000000-0000-0000-0000-000000000001/report/",
        {},
        format="json",
        HTTP_X_POP_LEASE="x",
    )

    assert response.status_code == 404


def test_abort_requested_is_in_the_answer_and_an_aborted_report_aborts(
    submitter, run_one, insight, report
):
    pulled = run_one(submitter, insight, callback_url="https://h.example/x")
    agenda_abort(principal=submitter.user, agenda=pulled.agenda)

    assert report(pulled).abort is True
    answer = report(
        pulled,
        state="aborted",
        operations=[{"name": "probe", "state": "succeeded", "result": {"size": 1}}],
    )

    assert answer.state == "aborted"
    progress = AgendaProgress.objects.get(agenda=pulled.agenda)
    assert progress.abort_requested is False
    states = dict(
        OperationProgress.objects.filter(agenda_progress=progress).values_list("name", "state")
    )
    assert states == {"probe": "succeeded", "report": "aborted"}
    assert Execution.objects.get(pk=pulled.execution.pk).outcome == "aborted"
    assert progress.attempts_completed == 0  # an abort uses no attempt


def test_batch_report_applies_each_item_alone(
    submitter, submit_agenda, insight, fill, pull, report, api_client_for
):
    for _ in range(4):
        submit_agenda(submitter)
    fill(insight)
    ok, finished, foreign, bad = pull(insight, count=4)
    report(finished, state="succeeded")
    finished_before = _snapshot(finished.agenda)

    response = api_client_for(submitter).post(
        "/api/v1/executions/report/",
        {
            "reports": [
                {
                    "execution": str(ok.execution.pk),
                    "lease_token": str(ok.execution.lease_token),
                    "state": "succeeded",
                },
                {
                    "execution": str(finished.execution.pk),
                    "lease_token": str(finished.execution.lease_token),
                    "state": "failed",
                },
                {
                    "execution": str(foreign.execution.pk),
                    "lease_token": "not-the-token",
                    "percent_complete": 5,
                },
                {
                    "execution": str(bad.execution.pk),
                    "lease_token": str(bad.execution.lease_token),
                    "operations": [{"name": "ghost"}],
                },
                {"execution": "not-a-uuid"},
            ]
        },
        format="json",
    )

    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["execution"], r["ok"], r["status"]) for r in results] == [
        (str(ok.execution.pk), True, 200),
        (str(finished.execution.pk), False, 409),
        (str(foreign.execution.pk), False, 403),
        (str(bad.execution.pk), False, 400),
        ("not-a-uuid", False, 400),
    ]
    assert results[0]["state"] == "succeeded"
    assert results[1]["current_state"] == "succeeded"
    assert "operations.0.name" in results[3]["errors"]
    assert AgendaProgress.objects.get(agenda=ok.agenda).state == "succeeded"
    assert _snapshot(finished.agenda) == finished_before
    assert AgendaProgress.objects.get(agenda=foreign.agenda).percent_complete == 0.0


def test_batch_of_more_than_100_reports_is_400(submitter, api_client_for):
    response = api_client_for(submitter).post(
        "/api/v1/executions/report/",
        {"reports": [{"execution": "x"}] * 101},
        format="json",
    )

    assert response.status_code == 400


def test_generated_operations_can_then_be_reported(
    submitter, run_one, insight, api_client_for, report
):
    pulled = run_one(submitter, insight)
    client = api_client_for(submitter)
    url = f"/api/v1/executions/{pulled.execution.pk}/operations/"
    lease = {"HTTP_X_POP_LEASE": str(pulled.execution.lease_token)}
    operation = {"name": "chunk-1", "type": "log", "depends_on": ["probe"]}

    created = client.post(url, {"operations": [operation]}, format="json", **lease)
    repeated = client.post(url, {"operations": [operation]}, format="json", **lease)
    clash = client.post(
        url, {"operations": [{"name": "PROBE", "type": "log"}]}, format="json", **lease
    )

    assert created.status_code == 201
    assert [op["name"] for op in created.json()["operations"]] == ["chunk-1"]
    assert repeated.status_code == 201
    assert clash.status_code == 400
    progress = AgendaProgress.objects.get(agenda=pulled.agenda)
    generated = OperationProgress.objects.get(agenda_progress=progress, name="chunk-1")
    assert (generated.is_generated, generated.position, generated.state) == (True, 2, "waiting")
    answer = report(pulled, operations=[{"name": "chunk-1", "state": "succeeded"}])
    assert answer.state == "executing"
    assert AgendaProgress.objects.get(agenda=pulled.agenda).percent_complete == pytest.approx(33.33)


def test_generated_operations_need_the_lease(submitter, run_one, insight, api_client_for):
    pulled = run_one(submitter, insight)

    response = api_client_for(submitter).post(
        f"/api/v1/executions/{pulled.execution.pk}/operations/",
        {"operations": [{"name": "x", "type": "log"}]},
        format="json",
    )

    assert response.status_code == 403
    assert OperationProgress.objects.filter(name="x").exists() is False
