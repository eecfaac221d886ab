"""Inbound triggers and their firings (docs/design.md §5.4)."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.models import OwnedModel


class Trigger(OwnedModel):
    """A signed event posted to `triggers/{id}/fire/` runs `template` with a mapped payload."""

    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="triggers"
    )
    name = models.CharField(max_length=200)
    template = models.ForeignKey(
        "agendas.AgendaTemplate", on_delete=models.PROTECT, related_name="triggers"
    )
    template_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="The template version each firing runs; empty: latest."
    )
    payload_mapping = models.JSONField(
        default=dict, blank=True, help_text="The run payload, with @</pointer> into the event."
    )
    filter = models.JSONField(
        default=list, blank=True, help_text="[{pointer, equals | prefix}]: all must hold."
    )
    labels = models.JSONField(default=dict, blank=True)
    event_id_pointer = models.CharField(max_length=500, blank=True, default="")
    # The HMAC key: verifying a signature needs it as is, so it cannot be stored hashed. It is
    # shown once (create, rotate) and never serialized afterwards.
    secret = models.CharField(max_length=128)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["customer", "name"], name="trigger_name_per_customer"),
        ]

    def __str__(self) -> str:
        return self.name


class TriggerFiring(models.Model):
    """One accepted (signed) event: what it did, or why it did nothing."""

    class Status(models.TextChoices):
        SUBMITTED = "submitted", "submitted"
        SKIPPED = "skipped", "skipped (filter miss)"
        REFUSED = "refused", "refused"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of their own: trigger_firing_newest and trigger_firing_customer_newest lead
    # with them.
    trigger = models.ForeignKey(
        Trigger, on_delete=models.CASCADE, related_name="firings", db_index=False
    )
    # The trigger's customer, copied: scoped lists filter and order by it without a join.
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    received_at = models.DateTimeField(default=timezone.now)
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    event_id = models.CharField(max_length=255, blank=True, default="")
    event = models.JSONField(default=dict, blank=True, help_text="The event, or its excerpt.")
    event_truncated = models.BooleanField(default=False)
    status = models.CharField(max_length=20, choices=Status.choices)
    reason = models.TextField(blank=True, default="")
    agenda = models.ForeignKey(
        "agendas.Agenda",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
    )
    cid = models.CharField(max_length=64, blank=True, default="")
    # sha256 of the request's X-POP-Signature: the same signed request is accepted once (the
    # key and event id are not signed, so they alone cannot stop a replay inside the window).
    signature_digest = models.CharField(max_length=64, blank=True, default="")

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            # De-duplication by index, not by scan; a refused or skipped firing holds no key,
            # so the same event can be sent again once the trigger is fixed.
            models.UniqueConstraint(
                fields=["trigger", "idempotency_key"],
                condition=~Q(idempotency_key="") & ~Q(status__in=["refused", "skipped"]),
                name="trigger_firing_key_once",
            ),
            models.UniqueConstraint(
                fields=["trigger", "event_id"],
                condition=~Q(event_id="") & ~Q(status__in=["refused", "skipped"]),
                name="trigger_firing_event_once",
            ),
            # Every firing, whatever its status, holds its signature.
            models.UniqueConstraint(
                fields=["trigger", "signature_digest"],
                condition=~Q(signature_digest=""),
                name="trigger_firing_signature_once",
            ),
        ]
        indexes = [
            models.Index(
                "trigger",
                models.F("received_at").desc(),
                models.F("id").desc(),
                name="trigger_firing_newest",
            ),
            models.Index(
                "customer",
                models.F("received_at").desc(),
                models.F("id").desc(),
                name="trigger_firing_customer_newest",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trigger_id} {self.status} {self.received_at:%Y-%m-%d %H:%M:%S}"
