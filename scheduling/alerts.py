"""The `alerts` timed process: evaluate `AlertRule`s, open and resolve `Alert`s (docs/design.md §8).

A rule measures one value over its scope — the insight when the rule names one (all
customers' work on it), else the rule's customer (its work on every insight):

- `queue_waiting`: agendas waiting for a puller (ready or queued) right now;
- `oldest_ready_age`: seconds since the oldest ready agenda became ready;
- `failure_ratio`: of the executions that ended in the last `window_seconds` with a result
  that counts as an attempt, the share that failed (failed, reclaimed or timed out);
- `reclaims`: executions whose lease expired (reclaimed, or unanswered: never reported) in the
  last `window_seconds`.

Above `threshold` an alert opens and its rule notifies once; while it stays open nothing more
is sent (its value is kept current). When the value is back at or below the threshold the
alert resolves and the rule notifies that too; a later breach opens a new alert. Notices go
by webhook (signed like callbacks, with the rule's customer's secret) and by e-mail through
Django's mail backend, after the transaction that opened or resolved the alert commits. They
are best effort: a failed notice is logged, not retried.

Evaluation is set-based: the rules of one kind and scope are measured together in one
statement (each rule an index range of its insight's or customer's rows, in its own window),
and a batch's alerts are written with one statement per kind of write, so a pass costs the
same number of statements for 4 rules as for 400 (docs/design.md §8.8).
"""

import logging
import smtplib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import (
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Func,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.expressions import Star
from django.utils import timezone

from agendas.models import Execution
from agendas.states import COUNTED_OUTCOMES
from scheduling.callbacks import encode_body, send_signed
from scheduling.models import Alert, AlertRule, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.scheduling.alerts")
Kind = AlertRule.Kind
Outcome = Execution.Outcome
FAILED_OUTCOMES = (Outcome.FAILED, Outcome.RECLAIMED, Outcome.TIMED_OUT)
RECLAIM_OUTCOMES = (Outcome.RECLAIMED, Outcome.UNANSWERED)
OPENED = "alert.opened"
RESOLVED = "alert.resolved"
# Rules evaluated per transaction: every batch costs the same statements, whatever its size.
BATCH = 500


@dataclass(frozen=True)
class AlertRun:
    """What one evaluation pass did."""

    evaluated: int = 0
    opened: int = 0
    resolved: int = 0
    notices_failed: int = 0


@dataclass(frozen=True)
class _Notice:
    event: str
    alert: Alert
    rule: AlertRule


def _scope_of(rule: AlertRule) -> str:
    """The column a rule's scope is matched on; every measured table has both."""
    return "insight_id" if rule.insight_id else "customer_id"


def _in_scope(model, scope: str) -> QuerySet:
    """The outer rule's rows of `model`: one index range per rule, inside one statement."""
    return model.objects.filter(**{scope: OuterRef(scope)}).order_by()


def _count(queryset: QuerySet) -> Subquery:
    # COUNT(*) without GROUP BY: one row, 0 when nothing matches; no column, so the scope and
    # window indexes answer it alone (index-only scans).
    counted = Func(Star(), function="COUNT", output_field=IntegerField())
    return Subquery(queryset.annotate(counted=counted).values("counted"))


def _window(scope: str, *, now: datetime, outcomes) -> QuerySet:
    """The rule's executions that ended in its window with one of `outcomes`."""
    return _in_scope(Execution, scope).filter(
        ended_at__gt=OuterRef("since"), ended_at__lte=now, outcome__in=sorted(outcomes)
    )


def _figures(kind: str, scope: str, *, now: datetime) -> dict:
    """The per-rule subqueries a kind's value is computed from."""
    if kind == Kind.QUEUE_WAITING:
        return {
            "ready": _count(_in_scope(ReadyAgenda, scope)),
            "queued": _count(_in_scope(QueuedAgenda, scope)),
        }
    if kind == Kind.OLDEST_READY_AGE:
        oldest = Func("added_at", function="MIN", output_field=DateTimeField())
        return {
            "oldest": Subquery(
                _in_scope(ReadyAgenda, scope).annotate(oldest=oldest).values("oldest")
            )
        }
    if kind == Kind.FAILURE_RATIO:
        return {  # FAILED_OUTCOMES are all counted outcomes
            "total": _count(_window(scope, now=now, outcomes=COUNTED_OUTCOMES)),
            "failed": _count(_window(scope, now=now, outcomes=FAILED_OUTCOMES)),
        }
    if kind == Kind.RECLAIMS:
        return {"reclaimed": _count(_window(scope, now=now, outcomes=RECLAIM_OUTCOMES))}
    raise ValueError(f"unknown alert rule kind {kind!r}")


def _value(kind: str, figures: dict, *, now: datetime) -> float:
    if kind == Kind.QUEUE_WAITING:
        return float(figures["ready"] + figures["queued"])
    if kind == Kind.OLDEST_READY_AGE:
        oldest = figures["oldest"]
        return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
    if kind == Kind.FAILURE_RATIO:
        return figures["failed"] / figures["total"] if figures["total"] else 0.0
    return float(figures["reclaimed"])


def measure_query(kind: str, scope: str, rule_ids: Sequence[UUID], *, now: datetime) -> QuerySet:
    """One statement measuring every rule of `kind` scoped by `scope` among `rule_ids`.

    Each rule's figures are correlated subqueries on the measured table, so each rule reads one
    index range (its insight's or customer's rows, in its own window for the windowed kinds).
    Values are dicts: `pk` and the kind's figures.
    """
    window = ExpressionWrapper(
        ExpressionWrapper(F("window_seconds"), output_field=IntegerField())
        * Value(timedelta(seconds=1)),
        output_field=DurationField(),
    )
    since = ExpressionWrapper(Value(now) - window, output_field=DateTimeField())
    figures = _figures(kind, scope, now=now)
    return (
        AlertRule.objects.filter(pk__in=rule_ids)
        .order_by()
        .annotate(since=since, **figures)
        .values("pk", *figures)
    )


def rules_measure(rules: Sequence[AlertRule], *, now: datetime) -> dict[UUID, float]:
    """Every rule's current value (see the module docstring): one statement per kind and scope
    present among `rules`, however many rules there are."""
    targets: dict[tuple[str, str], list[UUID]] = {}
    for rule in rules:
        if rule.kind not in Kind.values:
            raise ValueError(f"unknown alert rule kind {rule.kind!r}")
        targets.setdefault((rule.kind, _scope_of(rule)), []).append(rule.pk)
    values: dict[UUID, float] = {}
    for (kind, scope), rule_ids in targets.items():
        for row in measure_query(kind, scope, rule_ids, now=now):
            values[row["pk"]] = _value(kind, row, now=now)
    return values


def rule_measure(rule: AlertRule, *, now: datetime) -> float:
    """The rule's current value over its scope (see the module docstring)."""
    return rules_measure([rule], now=now)[rule.pk]


def describe(rule: AlertRule, value: float) -> str:
    """One line saying what was measured against what, for the alert and its notices."""
    where = f"insight {rule.insight.name}" if rule.insight_id else f"customer {rule.customer.slug}"
    window = f" over the last {rule.window_seconds} s"
    text = {
        Kind.QUEUE_WAITING: f"{value:g} agendas waiting (threshold {rule.threshold:g})",
        Kind.OLDEST_READY_AGE: (
            f"oldest ready agenda waiting {value:.0f} s (threshold {rule.threshold:g} s)"
        ),
        Kind.FAILURE_RATIO: (f"failure ratio {value:.2f} (threshold {rule.threshold:g}){window}"),
        Kind.RECLAIMS: f"{value:g} executions reclaimed (threshold {rule.threshold:g}){window}",
    }[rule.kind]
    return f"{rule.name}: {text} on {where}"


def alerts_evaluate(*, now: datetime | None = None) -> AlertRun:
    """Evaluate every enabled rule: open, update or resolve its alert, then send notices.

    Rules go in batches of `BATCH` (pk order), each one short transaction: the batch's rule
    rows locked with SKIP LOCKED, so two schedulers never evaluate (and notify for) the same
    rule at once; its rules measured with one statement per kind and scope (`rules_measure`);
    its alerts opened, updated and resolved with one statement each at most. Notices go after
    the batch commits. Open alerts of disabled rules resolve without a notice.
    """
    now = now or timezone.now()
    counts = {"evaluated": 0, "opened": 0, "resolved": 0, "notices_failed": 0}
    after = None
    while True:
        with transaction.atomic():
            batch = (
                AlertRule.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("customer", "insight")
                .filter(is_enabled=True)
                .order_by("pk")
            )
            if after is not None:
                batch = batch.filter(pk__gt=after)
            rules = list(batch[:BATCH])
            notices = _batch_evaluate(rules, now=now) if rules else []
        counts["evaluated"] += len(rules)
        for notice in notices:
            counts["opened" if notice.event == OPENED else "resolved"] += 1
            counts["notices_failed"] += _notify(notice)
        if len(rules) < BATCH:
            break
        after = rules[-1].pk
    Alert.objects.filter(state=Alert.State.OPEN, rule__is_enabled=False).update(
        state=Alert.State.RESOLVED, resolved_at=now, message="resolved: rule disabled"
    )
    return AlertRun(**counts)


def _batch_evaluate(rules: list[AlertRule], *, now: datetime) -> list[_Notice]:
    """Measure the (locked) rules and write their alerts; returns the notices to send."""
    values = rules_measure(rules, now=now)
    open_alerts = {
        alert.rule_id: alert
        for alert in Alert.objects.select_for_update().filter(
            rule_id__in=[rule.pk for rule in rules], state=Alert.State.OPEN
        )
    }
    created: list[Alert] = []
    changed: list[Alert] = []
    notices: list[_Notice] = []
    for rule in sorted(rules, key=lambda rule: (rule.name, rule.pk)):
        value = values[rule.pk]
        message = describe(rule, value)
        alert = open_alerts.get(rule.pk)
        if value > rule.threshold:
            if alert is None:
                alert = Alert(
                    rule=rule,
                    customer_id=rule.customer_id,
                    value=value,
                    message=message,
                    opened_at=now,
                )
                created.append(alert)
                notices.append(_Notice(OPENED, alert, rule))
            elif (alert.value, alert.message) != (value, message):
                alert.value, alert.message = value, message
                changed.append(alert)
        elif alert is not None:
            alert.state, alert.resolved_at = Alert.State.RESOLVED, now
            alert.value, alert.message = value, message
            changed.append(alert)
            notices.append(_Notice(RESOLVED, alert, rule))
    Alert.objects.bulk_create(created)
    Alert.objects.bulk_update(changed, ["state", "resolved_at", "value", "message"])
    for notice in notices:
        if notice.event == OPENED:
            logger.warning("alert opened: %s", notice.alert.message)
        else:
            logger.info("alert resolved: %s", notice.alert.message)
    return notices


def alert_payload(notice: _Notice) -> dict:
    """The JSON body of an alert webhook."""
    alert, rule = notice.alert, notice.rule
    return {
        "event": notice.event,
        "alert_id": alert.pk,
        "state": alert.state,
        "rule_id": str(rule.pk),
        "rule": rule.name,
        "kind": rule.kind,
        "customer": rule.customer.slug,
        "insight": rule.insight.name if rule.insight_id else None,
        "value": alert.value,
        "threshold": rule.threshold,
        "window_seconds": rule.window_seconds,
        "message": alert.message,
        "opened_at": alert.opened_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
    }


def _notify(notice: _Notice) -> int:
    """Send the notice by webhook and e-mail; returns how many of them failed."""
    rule, failed = notice.rule, 0
    if rule.webhook_url:
        result = send_signed(
            url=rule.webhook_url,
            body=encode_body(alert_payload(notice)),
            secret=rule.customer.callback_secret or "",
            event=notice.event,
        )
        if not result.is_success:
            failed += 1
            logger.warning(
                "alert %s: webhook %s failed: %s",
                notice.alert.pk,
                rule.webhook_url,
                result.error or f"HTTP {result.status_code}",
            )
    recipients = [address for address in rule.emails or [] if isinstance(address, str)]
    if recipients:
        verb = "opened" if notice.event == OPENED else "resolved"
        try:
            send_mail(
                subject=f"[POP] alert {verb}: {rule.name}",
                message=f"{notice.alert.message}\n\nAlert {notice.alert.pk} {verb} at "
                f"{(notice.alert.resolved_at or notice.alert.opened_at).isoformat()}.",
                from_email=None,
                recipient_list=recipients,
            )
        except (smtplib.SMTPException, OSError) as error:
            failed += 1
            logger.warning("alert %s: e-mail to %s failed: %s", notice.alert.pk, recipients, error)
    return failed
