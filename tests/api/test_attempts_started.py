"""Attempts read truly (docs/design.md §4.1): `attempts_started` is the attempt begun last —
the one an executing agenda is in, the ones an aborted or paused agenda used — beside
`attempts_completed`, which the retry policy counts."""

import pytest

from agendas.models import AgendaProgress
from agendas.services import agenda_abort, agenda_rerun
from core.principals import SYSTEM
from scheduling.fill import insight_fill
from scheduling.pull import insight_pull
from scheduling.report import execution_report

pytestmark = pytest.mark.django_db


def attempts(client, agenda) -> tuple[int, int]:
    progress = client.get(f"/api/v1/agendas/{agenda.pk}/").json()["progress"]
    return progress["attempts_started"], progress["attempts_completed"]


def pull_one(agenda):
    insight_fill(insight_id=agenda.insight_id)
    (pulled,) = insight_pull(principal=SYSTEM, insight=agenda.insight, worker="w1", count=1)
    return pulled.execution


def test_an_executing_agenda_is_in_its_first_attempt_and_a_retry_in_its_second(
    client, submitter, submit_agenda
):
    agenda = submit_agenda(submitter, max_attempts=3, retry_delay_seconds=0)
    assert attempts(client, agenda) == (0, 0)

    first = pull_one(agenda)
    assert attempts(client, agenda) == (1, 0)
    execution_report(execution_id=first.pk, lease_token=first.lease_token, state="failed")
    assert attempts(client, agenda) == (1, 1)
    pull_one(agenda)

    assert attempts(client, agenda) == (2, 1)


def test_an_agenda_aborted_while_executing_used_the_attempt_it_was_in(
    client, submitter, submit_agenda
):
    agenda = submit_agenda(submitter)
    execution = pull_one(agenda)
    agenda_abort(principal=submitter.user, agenda=agenda)

    execution_report(execution_id=execution.pk, lease_token=execution.lease_token, state="aborted")

    assert AgendaProgress.objects.get(agenda=agenda).state == "aborted"
    assert attempts(client, agenda) == (1, 0)  # begun, never counted against max_attempts


def test_a_rerun_starts_the_count_again(client, submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    execution = pull_one(agenda)
    execution_report(
        execution_id=execution.pk, lease_token=execution.lease_token, state="succeeded"
    )

    agenda_rerun(principal=submitter.user, agenda=agenda)

    assert attempts(client, agenda) == (0, 0)


def test_the_pages_say_which_attempt_an_agenda_is_in(submitter, submit_agenda):
    from django.test import Client

    agenda = submit_agenda(submitter, max_attempts=3)
    pull_one(agenda)
    browser = Client()
    browser.force_login(submitter.user)

    page = browser.get(f"/agendas/{agenda.pk}/").content.decode()

    assert "attempt 1 of 3" in page
