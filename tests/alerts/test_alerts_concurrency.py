"""Real PostgreSQL, real threads: two schedulers evaluating at once notify exactly once."""

import pytest
from django.core import mail
from django.db import connection

from scheduling.alerts import alerts_evaluate
from scheduling.models import Alert
from tests.threads import all_at_once

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
    results = all_at_once(EVALUATORS, alerts_evaluate)

    assert sum(result.opened for result in results) == RULES
    assert Alert.objects.filter(state="open").count() == RULES
    assert sorted(message.subject for message in mail.outbox) == sorted(
        f"[POP] alert opened: backlog {number}" for number in range(RULES)
    )
