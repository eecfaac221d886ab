"""Alert evaluation is set-based: the same statements for 4 rules of each kind as for 40, the
same values as measuring one rule at a time, and the window queries read an index."""

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail
from django.db import connection
from django.db.models import Count, Min, Q
from django.test.utils import CaptureQueriesContext

from agendas.models import Execution
from agendas.states import COUNTED_OUTCOMES
from resourcepools.models import Customer
from scheduling import alerts, timed
from scheduling.alerts import AlertRun, alerts_evaluate, measure_query, rules_measure
from scheduling.models import Alert, AlertRule, QueuedAgenda, ReadyAgenda
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db
Kind = AlertRule.Kind
Outcome = Execution.Outcome
START = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
LATER = START + timedelta(minutes=10)
WINDOWS = (60, 300, 3600)
TRANSCODE = [{"name": "t", "type": "transcode", "payload": {}}]


@pytest.fixture(autouse=True)
def _alert_settings(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


@pytest.fixture
def history(
    submitter, other_submitter, submit_agenda, insight, transcode_insight, fill, pull, report
):
    """Two customers' work on two insights between START and LATER, through the services:
    ready and queued agendas, executions that ended a minute apart (failed, succeeded), and one
    reclaimed unanswered."""
    with time_machine.travel(START, tick=False) as clock:
        for _ in range(6):
            submit_agenda(submitter)
        for _ in range(4):
            submit_agenda(other_submitter)
        submit_agenda(submitter, operations=TRANSCODE)
        submit_agenda(other_submitter, operations=TRANSCODE)
        fill(insight)
        fill(transcode_insight)
        pulled = pull(insight, count=6)
        outcomes = ["failed", "succeeded", "failed", "failed", "succeeded"]
        for item, state in zip(pulled[:5], outcomes, strict=True):
            clock.shift(timedelta(minutes=1))
            report(item, state=state)
        clock.shift(timedelta(seconds=insight.lease_seconds + 1))
        assert timed.executions_reclaim() == 1  # the sixth, never reported: `unanswered`
        pull(transcode_insight, count=1)
    return {"customers": [submitter.customer, other_submitter.customer]}


def one_rule_at_a_time(rule: AlertRule, now: datetime) -> float:
    """What each rule measured before evaluation became set-based: its own queries."""
    scope = Q(insight_id=rule.insight_id) if rule.insight_id else Q(customer_id=rule.customer_id)
    window = Q(ended_at__gt=now - timedelta(seconds=rule.window_seconds), ended_at__lte=now)
    if rule.kind == Kind.QUEUE_WAITING:
        return float(
            ReadyAgenda.objects.filter(scope).count() + QueuedAgenda.objects.filter(scope).count()
        )
    if rule.kind == Kind.OLDEST_READY_AGE:
        oldest = ReadyAgenda.objects.filter(scope).aggregate(oldest=Min("added_at"))["oldest"]
        return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
    if rule.kind == Kind.FAILURE_RATIO:
        counts = Execution.objects.filter(scope, window, outcome__in=COUNTED_OUTCOMES).aggregate(
            total=Count("pk"),
            failed=Count("pk", filter=Q(outcome__in=alerts.FAILED_OUTCOMES)),
        )
        return counts["failed"] / counts["total"] if counts["total"] else 0.0
    return float(
        Execution.objects.filter(scope, window, outcome__in=alerts.RECLAIM_OUTCOMES).count()
    )


def make_rules(customers, insights, *, per_kind: int, threshold: float = 0) -> list[AlertRule]:
    """`per_kind` rules of every kind, scoped by customer and by insight, windows mixed."""
    rules = [
        AlertRule(
            customer=customers[number % 2],
            insight=insights[number % 2] if number // 2 % 2 else None,
            kind=kind,
            name=f"{kind} {number:03}",
            threshold=threshold,
            window_seconds=WINDOWS[number % 3],
        )
        for kind in Kind.values
        for number in range(per_kind)
    ]
    return AlertRule.objects.bulk_create(rules)


def statements(**evaluate) -> tuple[AlertRun, int]:
    with CaptureQueriesContext(connection) as queries:
        run = alerts_evaluate(**evaluate)
    return run, len(queries.captured_queries)


def test_rules_measured_together_equal_each_rule_measured_alone(
    history, insight, transcode_insight
):
    rules = make_rules(history["customers"], [insight, transcode_insight], per_kind=12)
    for now in (START, START + timedelta(minutes=3), LATER, LATER + timedelta(hours=2)):
        measured = rules_measure(rules, now=now)

        assert measured == {rule.pk: one_rule_at_a_time(rule, now) for rule in rules}
    assert len(set(rules_measure(rules, now=LATER).values())) > 4  # not all zeros


def test_evaluation_costs_the_same_statements_for_4_and_40_rules_of_each_kind(
    history, insight, transcode_insight
):
    def passes(per_kind: int) -> list[int]:
        rules = make_rules(history["customers"], [insight, transcode_insight], per_kind=per_kind)
        breached = [rule for rule in rules if one_rule_at_a_time(rule, LATER) > 0]
        counted = []

        opening, count = statements(now=LATER)
        assert opening == AlertRun(evaluated=len(rules), opened=len(breached))
        counted.append(count)
        quiet, count = statements(now=LATER)  # same values: nothing written
        assert quiet == AlertRun(evaluated=len(rules))
        counted.append(count)
        ageing, count = statements(now=LATER + timedelta(seconds=1))  # oldest ages move on
        assert ageing == AlertRun(evaluated=len(rules))
        counted.append(count)
        AlertRule.objects.update(threshold=10**9)
        resolving, count = statements(now=LATER)
        assert resolving == AlertRun(evaluated=len(rules), resolved=len(breached))
        counted.append(count)

        assert set(Alert.objects.values_list("rule_id", flat=True)) == {r.pk for r in breached}
        assert not Alert.objects.filter(state=Alert.State.OPEN).exists()
        AlertRule.objects.all().delete()
        return counted

    few = passes(4)
    many = passes(40)

    assert few == many
    # the savepoint and its release, the batch's rules, 8 measures (4 kinds × 2 scopes), the
    # open alerts, then the insert or the update (none when quiet), and the disabled rules' sweep
    assert few == [14, 13, 14, 14]


def test_alerts_open_stay_current_and_resolve_across_many_rules(
    history, insight, transcode_insight
):
    rules = make_rules(history["customers"], [insight, transcode_insight], per_kind=8)
    for rule in rules:
        rule.emails = ["ops@acme.test"]
    AlertRule.objects.bulk_update(rules, ["emails"])
    breached = {rule.pk: rule for rule in rules if one_rule_at_a_time(rule, LATER) > 0}

    assert alerts_evaluate(now=LATER).opened == len(breached)

    opened = {alert.rule_id: alert for alert in Alert.objects.select_related("rule", "customer")}
    assert set(opened) == set(breached)
    for rule_id, alert in opened.items():
        value = one_rule_at_a_time(breached[rule_id], LATER)
        assert (alert.state, alert.value, alert.opened_at) == ("open", value, LATER)
        assert alert.customer == alert.rule.customer
        assert alert.message == alerts.describe(alert.rule, value)
    assert sorted(message.subject for message in mail.outbox) == sorted(
        f"[POP] alert opened: {rule.name}" for rule in breached.values()
    )

    later = LATER + timedelta(seconds=30)  # every breach still in its window; ages grow
    assert alerts_evaluate(now=later).opened == 0
    for alert in Alert.objects.filter(state="open").select_related("rule"):
        assert alert.value == one_rule_at_a_time(alert.rule, later)

    AlertRule.objects.filter(kind=Kind.OLDEST_READY_AGE).update(threshold=10**9)
    ages = [rule_id for rule_id, rule in breached.items() if rule.kind == Kind.OLDEST_READY_AGE]
    assert alerts_evaluate(now=later) == AlertRun(evaluated=len(rules), resolved=len(ages))
    assert set(Alert.objects.filter(state="resolved").values_list("rule_id", flat=True)) == set(
        ages
    )
    assert Alert.objects.filter(state="resolved", resolved_at=later).count() == len(ages)
    assert len(mail.outbox) == len(breached) + len(ages)
    assert mail.outbox[-1].subject.startswith("[POP] alert resolved: oldest_ready_age")


def test_rules_beyond_one_batch_are_all_evaluated(history, insight, transcode_insight, monkeypatch):
    monkeypatch.setattr(alerts, "BATCH", 5)
    rules = make_rules(history["customers"], [insight, transcode_insight], per_kind=4)
    breached = [rule for rule in rules if one_rule_at_a_time(rule, LATER) > 0]

    assert alerts_evaluate(now=LATER) == AlertRun(evaluated=len(rules), opened=len(breached))
    assert Alert.objects.filter(state="open").count() == len(breached)


# --- the window queries read the indexes (PostgreSQL's planner) ----------------------------


def clone_executions(source: Execution, copies: int, customers: list[Customer]) -> None:
    """Copy an ended execution `copies` times, in SQL: numbers after the source's, one ended a
    minute before the other, spread over `customers`, outcomes cycling. PostgreSQL only."""
    table = connection.ops.quote_name(Execution._meta.db_table)
    overrides = {
        "id": "gen_random_uuid()",
        "lease_token": "gen_random_uuid()",
        "number": "s.number + c.n",
        "customer_id": "(%s::uuid[])[c.n %% %s + 1]",
        "ended_at": "s.ended_at - c.n * interval '1 minute'",
        "outcome": "(ARRAY['succeeded', 'failed', 'reclaimed', 'unanswered'])[c.n %% 4 + 1]",
    }
    names = [field.column for field in Execution._meta.concrete_fields]
    columns = ", ".join(connection.ops.quote_name(name) for name in names)
    values = ", ".join(
        overrides.get(name, f"s.{connection.ops.quote_name(name)}") for name in names
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {values} "
            f"FROM generate_series(1, %s) AS c(n), {table} s WHERE s.id = %s",
            [[str(c.pk) for c in customers], len(customers), copies, source.pk],
        )
        cursor.execute(f"ANALYZE {table}")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner")
@pytest.mark.parametrize("kind", [Kind.FAILURE_RATIO, Kind.RECLAIMS])
def test_the_window_queries_read_the_scope_and_ended_at_indexes(
    history, insight, transcode_insight, kind
):
    customers = history["customers"] + [CustomerFactory() for _ in range(38)]
    source = Execution.objects.filter(outcome=Outcome.FAILED).earliest("ended_at")
    clone_executions(source, 20_000, customers)
    assert Execution.objects.count() > 20_000
    by_customer = make_rules(customers, [insight, transcode_insight], per_kind=2)
    by_insight = [
        rule for rule in make_rules(customers, [insight, insight], per_kind=4) if rule.insight_id
    ]
    plans = {}
    for scope, rules in (("customer_id", by_customer), ("insight_id", by_insight)):
        ids = [rule.pk for rule in rules if rule.kind == kind]
        plans[scope] = measure_query(kind, scope, ids, now=LATER).explain()

    for scope, index in (
        ("customer_id", "execution_customer_window"),
        ("insight_id", "execution_insight_window"),
    ):
        assert re.search(rf"(Index Scan on|Scan using) {index} ", plans[scope]), plans[scope]
        assert "Seq Scan on agendas_execution" not in plans[scope], plans[scope]
