from django.db import models
from django.db.models import Q

from agendas.queue_models import (
    CallbackDelivery,
    CustomerLane,
    InsightScheduleInfo,
    QueuedAgenda,
    ReadyAgenda,
)
from core.models import OwnedModel

__all__ = [
    "Alert",
    "AlertRule",
    "CallbackDelivery",
    "CustomerLane",
    "InsightScheduleInfo",
    "QueuedAgenda",
    "ReadyAgenda",
    "Schedule",
]


class Schedule(OwnedModel):
    """A cron schedule that submits agendas from a template."""

    class State(models.TextChoices):
        ACTIVE = "active", "active"
        PAUSED = "paused", "paused"
        EXPIRED = "expired", "expired"

    class CatchUp(models.TextChoices):
        SKIP = "skip", "skip missed runs"
        ONCE = "once", "run once for missed runs"

    class Overlap(models.TextChoices):
        ALLOW = "allow", "allow"
        SKIP = "skip", "skip while the previous run is not terminal"

    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="schedules"
    )
    name = models.CharField(max_length=200)
    template = models.ForeignKey(
        "agendas.AgendaTemplate", on_delete=models.PROTECT, related_name="schedules"
    )
    template_version = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The template version each run expands (pinned); empty: its latest version.",
    )
    payload = models.JSONField(default=dict, blank=True)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    state = models.CharField(max_length=20, choices=State.choices, default=State.ACTIVE)
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    catch_up = models.CharField(max_length=10, choices=CatchUp.choices, default=CatchUp.SKIP)
    overlap = models.CharField(max_length=10, choices=Overlap.choices, default=Overlap.ALLOW)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["customer", "name"], name="schedule_name_per_customer"),
        ]
        indexes = [models.Index(fields=["state", "next_run_at"], name="schedule_due")]

    def __str__(self) -> str:
        return self.name


class AlertRule(OwnedModel):
    class Kind(models.TextChoices):
        QUEUE_WAITING = "queue_waiting", "ready agendas waiting above N"
        OLDEST_READY_AGE = "oldest_ready_age", "oldest ready agenda older than S seconds"
        FAILURE_RATIO = "failure_ratio", "failure ratio above R over a window"
        RECLAIMS = "reclaims", "reclaims above N over a window"

    customer = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.CASCADE,
        related_name="alert_rules",
        help_text="Owner of the rule; also the scope when no insight is set.",
    )
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=30, choices=Kind.choices)
    insight = models.ForeignKey(
        "resourcepools.Insight",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
    )
    threshold = models.FloatField()
    window_seconds = models.PositiveIntegerField(default=300)
    webhook_url = models.URLField(max_length=1000, blank=True, default="")
    emails = models.JSONField(default=list, blank=True)
    is_enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Alert(models.Model):
    class State(models.TextChoices):
        OPEN = "open", "open"
        RESOLVED = "resolved", "resolved"

    rule = models.ForeignKey(
        "scheduling.AlertRule", on_delete=models.CASCADE, related_name="alerts"
    )
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="alerts"
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.OPEN)
    value = models.FloatField()
    message = models.TextField(blank=True, default="")
    opened_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-opened_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["rule"], condition=Q(state="open"), name="one_open_alert_per_rule"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rule} ({self.state})"
