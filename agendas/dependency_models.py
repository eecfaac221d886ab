"""Agendas that wait for other agendas (`after` at submit, docs/design.md §6.5): the wait of one
agenda and the upstream agendas it waits on. Written only by agendas/states/waits.py."""

from django.db import models
from django.db.models import Q


class AgendaWait(models.Model):
    """What one pending agenda waits for: `remaining` upstream agendas still to reach `on`."""

    class On(models.TextChoices):
        SUCCEEDED = "succeeded", "succeeded"
        COMPLETED = "completed", "completed"

    class OnFailure(models.TextChoices):
        FAIL = "fail", "fail"
        ABORT = "abort", "abort"

    agenda = models.OneToOneField(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="wait",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
    )
    on = models.CharField(max_length=16, choices=On.choices, default=On.SUCCEEDED)
    on_failure = models.CharField(max_length=16, choices=OnFailure.choices, default=OnFailure.FAIL)
    total = models.PositiveIntegerField()
    # Upstreams not yet in `on`; the release takes it to 0 in the upstream's own transaction.
    remaining = models.PositiveIntegerField()
    # The submitted `run_after`, kept here while the agenda waits (its progress has none, so
    # the promote never reads a waiting agenda) and applied when the wait is released.
    run_after = models.DateTimeField(null=True, blank=True)
    # When the wait ended: released (remaining reached 0), failed by an upstream, or given up
    # because the waiter itself ended (aborted).
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(remaining__lte=models.F("total")), name="agenda_wait_remaining_le_total"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agenda_id} waits for {self.remaining}/{self.total}"


class AgendaDependency(models.Model):
    """One upstream of a waiting agenda; `finished_at` is set when the upstream enters a terminal
    state (succeeded, failed or aborted) while the wait is open."""

    waiter = models.ForeignKey(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="upstream_links",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
        db_index=False,  # agenda_dependency_once leads with it
    )
    # Its index serves the release: the waiters of one upstream, never a scan.
    upstream = models.ForeignKey(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="waiter_links",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
    )
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["waiter", "upstream"], name="agenda_dependency_once"),
        ]

    def __str__(self) -> str:
        return f"{self.waiter_id} after {self.upstream_id}"
