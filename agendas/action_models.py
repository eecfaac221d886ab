"""Actions on a set of agendas (`agendas.bulk_actions`): one row per request, holding what was
asked and how far it got, so the set can be worked through in batches by a background task and
watched while it runs."""

import uuid

from django.conf import settings
from django.db import models


class AgendaActionJob(models.Model):
    class Action(models.TextChoices):
        ABORT = "abort", "abort"
        PAUSE = "pause", "pause"
        RESUME = "resume", "resume"
        RERUN = "rerun", "rerun"

    class Status(models.TextChoices):
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="agenda_action_jobs",
        help_text="The job acts with this user's rights, re-checked for every agenda.",
    )
    action = models.CharField(max_length=16, choices=Action.choices)
    mode = models.CharField(max_length=32, blank=True, default="")
    # Either {"filter": {list filter fields}} or {"ids": [...]}: re-applied batch by batch.
    selection = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    matched = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    skipped = models.JSONField(default=dict, help_text="Reason → how many agendas.")
    # Keyset position: the highest agenda id worked through so far.
    cursor = models.UUIDField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["requested_by", "-created_at"], name="action_job_by_user"),
            models.Index(
                fields=["updated_at"],
                name="action_job_running",
                condition=models.Q(status="running"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} job {self.pk} ({self.status})"

    @property
    def skipped_count(self) -> int:
        return sum(self.skipped.values())
