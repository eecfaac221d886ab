"""A failure the worker reports as not retryable (`retryable: false` on the report or on a
failed operation) fails the agenda at once, whatever attempts remain, and leaves no
`run_after` behind; a retryable one is retried as before."""

import pytest

from agendas.models import AgendaProgress, Execution
from scheduling import report as report_service

pytestmark = pytest.mark.django_db


@pytest.fixture
def pulled(submitter, submit_agenda, insight, fill, pull):
    agenda = submit_agenda(submitter, max_attempts=3, retry_delay_seconds=30)
    fill(insight)
    (pulled,) = pull(insight, count=1)
    return agenda, pulled.execution


def test_a_report_marked_not_retryable_fails_the_agenda_with_attempts_left(pulled, report):
    agenda, execution = pulled

    answer = report(execution, state="failed", message="payload needs an input", retryable=False)

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert answer.state == progress.state == "failed"
    assert progress.attempts_completed == 1
    assert progress.run_after is None
    assert progress.message == "failed, not retryable (attempt 1 of 3): payload needs an input"
    assert progress.diagnostics[-1]["code"] == "not_retryable"
    assert Execution.objects.get(pk=execution.pk).outcome == "failed"


def test_a_failed_operation_marked_not_retryable_is_enough(pulled, report):
    agenda, execution = pulled

    report(
        execution,
        state="failed",
        operations=[{"name": "probe", "state": "failed", "retryable": False}],
    )

    assert AgendaProgress.objects.get(agenda=agenda).state == "failed"


def test_a_retryable_failure_still_waits_for_its_retry(pulled, report):
    agenda, execution = pulled

    report(
        execution,
        state="failed",
        operations=[{"name": "probe", "state": "failed", "retryable": True}],
    )

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == "pending"
    assert progress.run_after is not None


def test_retryable_false_on_a_success_changes_nothing(pulled, report):
    agenda, execution = pulled

    report(execution, state="succeeded", retryable=False)

    assert AgendaProgress.objects.get(agenda=agenda).state == "succeeded"


def test_batch_reports_carry_retryable_too(pulled):
    agenda, execution = pulled

    (result,) = report_service.execution_report_batch(
        reports=[
            {
                "execution": str(execution.pk),
                "lease_token": str(execution.lease_token),
                "state": "failed",
                "retryable": False,
            }
        ]
    )

    assert result.status == 200
    assert AgendaProgress.objects.get(agenda=agenda).state == "failed"


def test_the_last_failed_attempt_leaves_no_run_after(
    submitter, submit_agenda, insight, fill, pull, report
):
    agenda = submit_agenda(submitter, max_attempts=2, retry_delay_seconds=0)
    for _ in range(2):
        fill(insight)
        (pulled,) = pull(insight, count=1)
        report(pulled, state="failed", message="boom")

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == "failed"
    assert progress.run_after is None


def test_the_api_refuses_a_retryable_that_is_not_a_boolean(pulled, api_client_for, worker):
    agenda, execution = pulled
    client = api_client_for(worker)

    answer = client.post(
        f"/api/v1/executions/{execution.pk}/report/",
        {"state": "failed", "retryable": "perhaps"},
        format="json",
        HTTP_X_POP_LEASE=str(execution.lease_token),
    )

    assert answer.status_code == 400
    assert "retryable" in answer.json()
    assert AgendaProgress.objects.get(agenda=agenda).state == "executing"
