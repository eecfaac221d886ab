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
"""

import logging
import smtplib
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Count, Min, Q
from django.utils import timezone

from agendas.models import Execution
from agendas.states import COUNTED_OUTCOMES
from scheduling.callbacks import encode_body, send_signed
from scheduling.models import Alert, AlertRule, QueuedAgenda, ReadyAgenda

logger = logging.getLogger("pop.scheduling.alerts")
Kind = AlertRule.Kind
Outcome = Execution.Outcome
FAILED_OUTCOMES = (Outcome.FAILED, Outcome.RECLAIMED, Outcome.TIMED_OUT)
OPENED = "alert.opened"
RESOLVED = "alert.resolved"


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


def rule_measure(rule: AlertRule, *, now: datetime) -> float:
    """The rule's current value over its scope (see the module docstring)."""
    scope = Q(insight_id=rule.insight_id) if rule.insight_id else Q(customer_id=rule.customer_id)
    since = now - timedelta(seconds=rule.window_seconds)
    if rule.kind == Kind.QUEUE_WAITING:
        return float(
            ReadyAgenda.objects.filter(scope).count() + QueuedAgenda.objects.filter(scope).count()
        )
    if rule.kind == Kind.OLDEST_READY_AGE:
        oldest = ReadyAgenda.objects.filter(scope).aggregate(oldest=Min("added_at"))["oldest"]
        return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0
    if rule.kind == Kind.FAILURE_RATIO:
        counts = Execution.objects.filter(
            scope, ended_at__gt=since, ended_at__lte=now, outcome__in=COUNTED_OUTCOMES
        ).aggregate(total=Count("pk"), failed=Count("pk", filter=Q(outcome__in=FAILED_OUTCOMES)))
        return counts["failed"] / counts["total"] if counts["total"] else 0.0
    if rule.kind == Kind.RECLAIMS:
        return float(
            Execution.objects.filter(
                scope,
                outcome__in=(Outcome.RECLAIMED, Outcome.UNANSWERED),
                ended_at__gt=since,
                ended_at__lte=now,
            ).count()
        )
    raise ValueError(f"unknown alert rule kind {rule.kind!r}")


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

    One short transaction per rule, its row locked with SKIP LOCKED so two schedulers never
    evaluate (and notify for) the same rule at once. Open alerts of disabled rules resolve
    without a notice.
    """
    now = now or timezone.now()
    counts = {"evaluated": 0, "opened": 0, "resolved": 0, "notices_failed": 0}
    rule_ids = list(AlertRule.objects.filter(is_enabled=True).values_list("pk", flat=True))
    for rule_id in rule_ids:
        with transaction.atomic():
            rule = (
                AlertRule.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("customer", "insight")
                .filter(pk=rule_id, is_enabled=True)
                .first()
            )
            if rule is None:
                continue
            notice = _rule_evaluate(rule, now=now)
        counts["evaluated"] += 1
        if notice is None:
            continue
        counts["opened" if notice.event == OPENED else "resolved"] += 1
        counts["notices_failed"] += _notify(notice)
    Alert.objects.filter(state=Alert.State.OPEN, rule__is_enabled=False).update(
        state=Alert.State.RESOLVED, resolved_at=now, message="resolved: rule disabled"
    )
    return AlertRun(**counts)


def _rule_evaluate(rule: AlertRule, *, now: datetime) -> _Notice | None:
    value = rule_measure(rule, now=now)
    message = describe(rule, value)
    alert = Alert.objects.select_for_update().filter(rule=rule, state=Alert.State.OPEN).first()
    if value > rule.threshold:
        if alert is not None:
            Alert.objects.filter(pk=alert.pk).update(value=value, message=message)
            return None
        alert = Alert.objects.create(
            rule=rule, customer_id=rule.customer_id, value=value, message=message, opened_at=now
        )
        logger.warning("alert opened: %s", message)
        return _Notice(OPENED, alert, rule)
    if alert is None:
        return None
    Alert.objects.filter(pk=alert.pk).update(
        state=Alert.State.RESOLVED, resolved_at=now, value=value, message=message
    )
    alert.refresh_from_db()
    logger.info("alert resolved: %s", message)
    return _Notice(RESOLVED, alert, rule)


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
