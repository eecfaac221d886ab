"""AuditEvent: one state-changing action by a person, a token or the system. Append-only."""

import uuid

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    """Written by audit.services inside the transaction of the change it records.

    Never changed afterwards: `save()` refuses an existing row and `delete()` refuses
    always. Deleting the customer or the user keeps the event (the link becomes null, the
    username snapshot stays).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    created_at = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    customer = models.ForeignKey(
        "resourcepools.Customer",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
        db_index=False,  # audit_customer_time leads with it
        help_text="The customer the action was for; empty for actions of no one customer.",
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="audit_events",
        help_text="Who acted; empty for the system (and once the user is deleted).",
    )
    username = models.CharField(
        max_length=150, help_text='The actor\'s username when it acted, or "system".'
    )
    token_name = models.CharField(
        max_length=100, blank=True, default="", help_text="The API token used; empty: a session."
    )
    action = models.CharField(max_length=64, help_text='What was done: "agenda.abort".')
    target_type = models.CharField(
        max_length=100, blank=True, default="", help_text='Model of the target: "agendas.agenda".'
    )
    target_id = models.CharField(
        max_length=64, blank=True, default="", help_text="Id of the target."
    )
    detail = models.JSONField(
        default=dict, blank=True, encoder=DjangoJSONEncoder, help_text="Small, bounded facts."
    )
    address = models.GenericIPAddressField(null=True, blank=True, help_text="Client address.")
    cid = models.CharField(
        max_length=64, blank=True, default="", help_text="Correlation id of the request."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["customer", "-created_at"], name="audit_customer_time"),
            models.Index(
                fields=["customer", "action", "-created_at"], name="audit_cust_action_time"
            ),
            models.Index(fields=["action", "-created_at"], name="audit_action_time"),
            # The other exact filters, for staff (the leading column) and for a customer's
            # admin (the second), newest first: a name nobody acted under is not a scan of
            # the trail. `target_id` is near unique: its own index serves both.
            models.Index(fields=["username", "customer", "-created_at"], name="audit_user_time"),
            models.Index(fields=["token_name", "customer", "-created_at"], name="audit_token_time"),
            models.Index(
                fields=["target_type", "customer", "-created_at"], name="audit_target_type_time"
            ),
            models.Index(fields=["target_id"], name="audit_target_id"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.username} {self.action}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ValueError("Audit events are never changed.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Audit events are never deleted.")
