"""Real PostgreSQL, real threads: two schedulers evaluating at once notify exactly once."""

import threading

import pytest
from django.core import mail
from django.db import connection

from scheduling.alerts import AlertRun, alerts_evaluate
from scheduling.models import Alert

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="row locks are proven on PostgreSQL"
    ),
]
EVALUATORS = 4
RULES = 10


def test_concurrent_evaluations_open_each_alert_once_and_notify_once(
    submitter, submit_agenda, make_rule
):
    for number in range(RULES):
        make_rule(name=f"backlog {number}", threshold=0, emails=["ops@acme.test"])
    submit_agenda(submitter)
    start = threading.Barrier(EVALUATORS)
    results: list[AlertRun] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait()
            results.append(alerts_evaluate())
        except BaseException as error:  # surfaced by the test, not swallowed
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(EVALUATORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert sum(result.opened for result in results) == RULES
    assert Alert.objects.filter(state="open").count() == RULES
    assert sorted(message.subject for message in mail.outbox) == sorted(
        f"[POP] alert opened: backlog {number}" for number in range(RULES)
    )
