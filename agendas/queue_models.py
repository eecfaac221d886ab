"""The rows the state machine writes as an agenda moves: the ready set and the insight queues
(read by the fill and the pull), the rate limits' token buckets (drawn from as agendas enter
the queues) and the callback outbox (delivered by scheduling.callbacks).

They live beside the agenda because entering a state writes them in the same transaction;
their tables keep the names they were created with (`scheduling_*`).
"""

from datetime import datetime, timedelta

from django.db import models
from django.db.models import Q


class ReadyAgenda(models.Model):
    """An agenda eligible to be queued; the fill reads these through the fairness index."""

    agenda = models.OneToOneField(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="ready_entry",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
    )
    insight = models.ForeignKey(
        "resourcepools.Insight",
        on_delete=models.CASCADE,
        related_name="ready_agendas",
        db_index=False,  # ready_fair_order and ready_fifo_order lead with it
    )
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="ready_agendas"
    )
    priority = models.PositiveSmallIntegerField(default=5)
    added_at = models.DateTimeField()

    class Meta:
        db_table = "scheduling_readyagenda"
        indexes = [
            models.Index(
                "insight",
                "customer",
                models.F("priority").desc(),
                "added_at",
                name="ready_fair_order",
            ),
            models.Index(fields=["insight", "added_at"], name="ready_fifo_order"),
        ]

    def __str__(self) -> str:
        return f"ready {self.agenda_id}"


class InsightScheduleInfo(models.Model):
    """The fill's bookkeeping for one insight: queue positions, the virtual time new lanes
    start at, fair share's decay epoch and the last fill."""

    insight = models.OneToOneField(
        "resourcepools.Insight", on_delete=models.CASCADE, related_name="schedule_info"
    )
    virtual_time = models.FloatField(
        default=0.0,
        help_text="Service level of the last turn given: a lane that gets work again starts here.",
    )
    usage_epoch = models.DateTimeField(
        null=True, blank=True, help_text="Fair share: when charges were last rebased (decay)."
    )
    next_position = models.BigIntegerField(default=1)
    last_fill_at = models.DateTimeField(null=True, blank=True)
    last_fill_count = models.PositiveIntegerField(default=0)
    last_fill_queue_after = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="The queue's length the last fill left (the next fill's pace).",
    )

    class Meta:
        db_table = "scheduling_insightscheduleinfo"
        verbose_name_plural = "insight schedule info"

    def __str__(self) -> str:
        return f"schedule info of {self.insight_id}"


class PendingFillNudge(models.Model):
    """A fill task enqueued for an insight and not yet started: while it is here (and younger
    than `agendas.fill_nudge.NUDGE_PENDING_SECONDS`), further nudges of that insight enqueue
    nothing — the task to come sees their work. At most one waiting fill task per insight,
    however long the cluster is away."""

    insight = models.OneToOneField(
        "resourcepools.Insight", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    enqueued_at = models.DateTimeField()

    class Meta:
        db_table = "scheduling_pendingfillnudge"

    def __str__(self) -> str:
        return f"fill nudge of {self.insight_id} pending since {self.enqueued_at}"


class CustomerLane(models.Model):
    """One customer's turn-keeping on one insight: how much service it has received, in the
    insight's algorithm's units (turns for round robin, turns ÷ weight for weighted fair,
    decayed execution seconds ÷ weight for fair share). The fill serves the active lanes in
    `served` order through `lane_turn_order`, so it reads O(room) lanes whatever the number of
    customers. A lane is made active, in the transaction that makes one of its agendas ready
    (agendas.states.lanes); the fill makes it inactive when it finds it empty
    (docs/design.md §6.1)."""

    insight = models.ForeignKey(
        "resourcepools.Insight",
        on_delete=models.CASCADE,
        related_name="customer_lanes",
        db_index=False,  # lane_of_customer leads with it
    )
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="customer_lanes"
    )
    active = models.BooleanField(default=True)
    served = models.FloatField(default=0.0)
    mean_seconds = models.FloatField(
        null=True, blank=True, help_text="Running mean of this customer's execution time here."
    )
    pending_count = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Fair share: agendas charged when queued whose execution has not ended.",
    )
    pending_charge = models.FloatField(
        default=0.0,
        db_default=0.0,
        help_text="Fair share: the seconds they were charged, to correct at their end.",
    )

    class Meta:
        db_table = "scheduling_customerlane"
        constraints = [
            models.UniqueConstraint(fields=["insight", "customer"], name="lane_of_customer")
        ]
        indexes = [
            models.Index(
                fields=["insight", "served", "customer"],
                condition=Q(active=True),
                name="lane_turn_order",
            )
        ]

    def __str__(self) -> str:
        return f"lane of {self.customer_id} on {self.insight_id}"


class QueuedAgenda(models.Model):
    """An agenda in its insight's queue, pulled in `position` order."""

    agenda = models.OneToOneField(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="queue_entry",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
    )
    insight = models.ForeignKey(
        "resourcepools.Insight",
        on_delete=models.CASCADE,
        related_name="queued_agendas",
        db_index=False,  # queue_order leads with it
    )
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="queued_agendas"
    )
    position = models.BigIntegerField()
    queued_at = models.DateTimeField()

    class Meta:
        db_table = "scheduling_queuedagenda"
        indexes = [models.Index(fields=["insight", "position"], name="queue_order")]

    def __str__(self) -> str:
        return f"queued {self.agenda_id} @ {self.position}"


class CallbackDelivery(models.Model):
    """Outbox row: one customer callback, written in the transaction of the state change."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"

    id = models.BigAutoField(primary_key=True)
    agenda = models.ForeignKey(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="callback_deliveries",
        db_constraint=False,  # see AGENDA_SIDE_ROWS in agendas/states/reap.py
        db_index=False,  # callback_agenda_order leads with it
    )
    customer = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.CASCADE,
        related_name="callback_deliveries",
        db_index=False,  # callback_customer_order leads with it
    )
    link_id = models.CharField(max_length=255, blank=True, default="")
    # The agenda's, as link_id: `?cid=` reads the agenda's index (CallbackDeliveryFilter).
    cid = models.CharField(max_length=64, blank=True, default="")
    url = models.URLField(max_length=1000)
    event = models.CharField(max_length=20)
    body = models.JSONField()
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PENDING)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "scheduling_callbackdelivery"
        verbose_name_plural = "callback deliveries"
        ordering = ["-id"]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="callback_due",
            ),
            models.Index(fields=["agenda", "id"], name="callback_agenda_order"),
            # The list, newest first, for a customer, and by `?event=` (staff: the leading
            # column; a customer: the second) and `?link_id=` (the rows that have one): each
            # reads the matching entries only, whatever the outbox holds.
            models.Index(fields=["customer", "-id"], name="callback_customer_order"),
            models.Index(fields=["event", "customer", "-id"], name="callback_event_order"),
            models.Index(fields=["link_id"], condition=~Q(link_id=""), name="callback_link_id"),
            # The given-up deliveries /metrics counts, however many were delivered.
            models.Index(fields=["id"], condition=Q(status="failed"), name="callback_failed"),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.url} ({self.status})"


class StartBucket(models.Model):
    """The token bucket of a rate limit ("at most N agendas started per period"), of a customer
    (over all insights) or of an insight: entering `queued` takes a token. It holds N tokens at
    most and gains N per period; `tokens` is the level at `refilled_at`. The fill locks the
    buckets it draws from (docs/design.md §6.1)."""

    customer = models.OneToOneField(
        "resourcepools.Customer",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="start_bucket",
    )
    insight = models.OneToOneField(
        "resourcepools.Insight",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="start_bucket",
    )
    tokens = models.FloatField()
    refilled_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(customer__isnull=True, insight__isnull=False)
                | Q(customer__isnull=False, insight__isnull=True),
                name="start_bucket_one_owner",
            )
        ]

    def __str__(self) -> str:
        return f"start bucket of {self.customer_id or self.insight_id}"

    def level(self, now: datetime, *, limit: int, period_seconds: int) -> float:
        """Tokens at `now`: the stored level plus what the elapsed time added, at most `limit`."""
        elapsed = max(0.0, (now - self.refilled_at).total_seconds())
        return min(float(limit), self.tokens + elapsed * limit / period_seconds)

    def next_token_at(self, now: datetime, *, limit: int, period_seconds: int) -> datetime:
        """When a whole token will be there (now, when one is)."""
        level = self.level(now, limit=limit, period_seconds=period_seconds)
        if level >= 1:
            return now
        return now + timedelta(seconds=(1 - level) * period_seconds / limit)

    def take(self, count: int, now: datetime, *, limit: int, period_seconds: int) -> None:
        """Refill to `now` and take `count` tokens (the caller checked they are there)."""
        self.tokens = self.level(now, limit=limit, period_seconds=period_seconds) - count
        self.refilled_at = now
