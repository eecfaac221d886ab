"""Alert rules: open once, stay quiet while open, resolve, notify again after re-opening."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail

from agendas.services import agenda_abort
from scheduling import fill, report, timed
from scheduling.alerts import AlertRun, alerts_evaluate, rule_measure
from scheduling.models import Alert, AlertRule
from tests.alerts.conftest import SECRET

pytestmark = pytest.mark.django_db
Kind = AlertRule.Kind
START = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)


def clock_now() -> datetime:
    return datetime.now(UTC)  # the travelled clock


def test_an_alert_opens_once_stays_quiet_while_open_resolves_and_notifies_again_on_reopening(
    customer, submitter, submit_agenda, make_rule, http_receiver
):
    customer.callback_secret = SECRET
    customer.save(update_fields=["callback_secret"])
    receiver = http_receiver()
    rule = make_rule(
        name="acme backlog", threshold=1, webhook_url=receiver.url, emails=["ops@acme.test"]
    )
    first = submit_agenda(submitter)

    assert alerts_evaluate() == AlertRun(evaluated=1)  # 1 waiting is not above 1
    assert Alert.objects.count() == 0

    second = submit_agenda(submitter)
    assert alerts_evaluate() == AlertRun(evaluated=1, opened=1)
    [alert] = Alert.objects.all()
    assert (alert.state, alert.value, alert.customer) == ("open", 2.0, customer)
    assert alert.message == "acme backlog: 2 agendas waiting (threshold 1) on customer acme"
    [opened] = receiver.requests
    assert opened.signature_verifies(SECRET)
    assert opened.headers["x-pop-event"] == "alert.opened"
    assert opened.json["alert_id"] == alert.pk
    assert (opened.json["state"], opened.json["value"], opened.json["kind"]) == (
        "open",
        2.0,
        "queue_waiting",
    )
    [opened_mail] = mail.outbox
    assert opened_mail.to == ["ops@acme.test"]
    assert opened_mail.subject == "[POP] alert opened: acme backlog"
    assert alert.message in opened_mail.body

    submit_agenda(submitter)
    assert alerts_evaluate() == AlertRun(evaluated=1)  # still open: no second notice
    assert alerts_evaluate() == AlertRun(evaluated=1)
    alert.refresh_from_db()
    assert (alert.state, alert.value) == ("open", 3.0)
    assert len(receiver.requests) == 1
    assert len(mail.outbox) == 1

    agenda_abort(principal=submitter.user, agenda=first)
    agenda_abort(principal=submitter.user, agenda=second)
    assert alerts_evaluate() == AlertRun(evaluated=1, resolved=1)
    alert.refresh_from_db()
    assert (alert.state, alert.value) == ("resolved", 1.0)
    assert alert.resolved_at is not None
    assert receiver.events() == ["alert.opened", "alert.resolved"]
    assert receiver.requests[1].json["resolved_at"] == alert.resolved_at.isoformat()
    assert mail.outbox[1].subject == "[POP] alert resolved: acme backlog"
    assert alerts_evaluate() == AlertRun(evaluated=1)

    submit_agenda(submitter)
    assert alerts_evaluate() == AlertRun(evaluated=1, opened=1)
    assert list(Alert.objects.filter(rule=rule).values_list("state", flat=True)) == [
        "open",
        "resolved",
    ]
    assert receiver.events() == ["alert.opened", "alert.resolved", "alert.opened"]
    assert [message.subject for message in mail.outbox] == [
        "[POP] alert opened: acme backlog",
        "[POP] alert resolved: acme backlog",
        "[POP] alert opened: acme backlog",
    ]


def test_queue_waiting_counts_ready_and_queued_agendas_in_the_rules_scope(
    submitter, other_submitter, submit_agenda, insight, transcode_insight, make_rule, pull_all
):
    for _ in range(3):
        submit_agenda(submitter)
    submit_agenda(other_submitter)
    submit_agenda(submitter, operations=[{"name": "t", "type": "transcode", "payload": {}}])
    fill.insight_fill(insight_id=insight.pk)  # some queued, none pulled yet
    customer_rule = make_rule(name="acme")
    insight_rule = make_rule(name="mediainfo", insight=insight)
    other_insight_rule = make_rule(name="transcode", insight=transcode_insight)

    assert rule_measure(customer_rule, now=START) == 4.0  # acme, on both insights
    assert rule_measure(insight_rule, now=START) == 4.0  # every customer, mediainfo only
    assert rule_measure(other_insight_rule, now=START) == 1.0
    pull_all()
    assert rule_measure(insight_rule, now=START) == 0.0


def test_oldest_ready_age_is_seconds_since_the_oldest_ready_agenda_became_ready(
    submitter, submit_agenda, make_rule
):
    rule = make_rule(kind=Kind.OLDEST_READY_AGE, threshold=300)
    assert rule_measure(rule, now=START) == 0.0
    with time_machine.travel(START, tick=False) as clock:
        submit_agenda(submitter)
        clock.shift(timedelta(seconds=120))
        submit_agenda(submitter)
        clock.shift(timedelta(seconds=240))

        assert rule_measure(rule, now=START + timedelta(seconds=360)) == 360.0
        assert alerts_evaluate() == AlertRun(evaluated=1, opened=1)

    assert Alert.objects.get().message == (
        "rule oldest_ready_age: oldest ready agenda waiting 360 s (threshold 300 s) "
        "on customer acme"
    )


def test_failure_ratio_is_the_share_of_attempts_that_failed_within_the_window(
    submitter, submit_agenda, make_rule, pull_all
):
    rule = make_rule(kind=Kind.FAILURE_RATIO, threshold=0.5, window_seconds=600)
    with time_machine.travel(START, tick=False) as clock:
        for _ in range(4):
            submit_agenda(submitter)
        pulled = pull_all()
        outcomes = ["failed", "failed", "failed", "succeeded"]
        for item, state in zip(pulled, outcomes, strict=True):
            report.execution_report(
                execution_id=item.execution.pk, lease_token=item.execution.lease_token, state=state
            )

        assert rule_measure(rule, now=START) == 0.75
        assert alerts_evaluate() == AlertRun(evaluated=1, opened=1)
        clock.shift(timedelta(seconds=601))
        assert rule_measure(rule, now=START + timedelta(seconds=601)) == 0.0
        assert alerts_evaluate() == AlertRun(evaluated=1, resolved=1)


def test_reclaims_count_executions_whose_lease_expired_within_the_window(
    submitter, submit_agenda, make_rule, pull_all, insight
):
    rule = make_rule(kind=Kind.RECLAIMS, threshold=1, window_seconds=300, insight=insight)
    with time_machine.travel(START, tick=False) as clock:
        submit_agenda(submitter)
        submit_agenda(submitter)
        pull_all()
        clock.shift(timedelta(seconds=insight.lease_seconds + 1))
        assert timed.executions_reclaim() == 2

        assert rule_measure(rule, now=clock_now()) == 2.0
        assert alerts_evaluate() == AlertRun(evaluated=1, opened=1)
        clock.shift(timedelta(seconds=301))
        assert rule_measure(rule, now=clock_now()) == 0.0


def test_a_failing_webhook_does_not_stop_the_alert_or_its_e_mail(
    submitter, submit_agenda, make_rule, http_receiver
):
    receiver = http_receiver(respond=lambda request: 500)
    make_rule(threshold=0, webhook_url=receiver.url, emails=["ops@acme.test"])
    submit_agenda(submitter)

    assert alerts_evaluate() == AlertRun(evaluated=1, opened=1, notices_failed=1)

    assert Alert.objects.get().state == "open"
    assert len(receiver.requests) == 1
    assert len(mail.outbox) == 1


def test_a_disabled_rule_is_not_evaluated_and_its_open_alert_resolves_without_a_notice(
    submitter, submit_agenda, make_rule
):
    rule = make_rule(threshold=0, emails=["ops@acme.test"])
    submit_agenda(submitter)
    alerts_evaluate()
    assert len(mail.outbox) == 1
    rule.is_enabled = False
    rule.save(update_fields=["is_enabled"])

    assert alerts_evaluate() == AlertRun()

    alert = Alert.objects.get()
    assert (alert.state, alert.message) == ("resolved", "resolved: rule disabled")
    assert len(mail.outbox) == 1
