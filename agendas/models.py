import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from agendas.action_models import AgendaActionJob
from agendas.dependency_models import AgendaDependency, AgendaWait
from agendas.queue_models import (
    CallbackDelivery,
    CustomerLane,
    PendingFillNudge,
    QueuedAgenda,
    ReadyAgenda,
)
from agendas.template_version_models import AgendaTemplateVersion
from core.models import OwnedModel, cid_field, link_id_field

# The queue, outbox and action-job models register with this app from their own module.
__all__ = [
    "AgendaActionJob",
    "AgendaDependency",
    "AgendaWait",
    "AgendaTemplateVersion",
    "CallbackDelivery",
    "CustomerLane",
    "PendingFillNudge",
    "QueuedAgenda",
    "ReadyAgenda",
]


class AgendaTemplate(OwnedModel):
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="agenda_templates"
    )
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    agenda = models.JSONField(help_text="Agenda body with @<…> references (docs/design.md §5.3).")
    static_parameters = models.JSONField(default=dict, blank=True)
    payload_schema = models.JSONField(
        null=True, blank=True, help_text="Optional JSON Schema the run payload must satisfy."
    )
    is_global = models.BooleanField(default=False)
    allowed_customers = models.ManyToManyField(
        "resourcepools.Customer", blank=True, related_name="allowed_templates"
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["customer", "name"], name="template_name_per_customer"),
        ]

    def __str__(self) -> str:
        return self.name


class Agenda(OwnedModel):
    """The request: immutable once submitted."""

    # The history tables' keys carry plain named indexes only (see `link_id_field`), and no
    # customer index of their own: the customer's composite indexes lead with it.
    link_id = link_id_field(db_index=False)
    cid = cid_field(db_index=False)
    customer = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.CASCADE,
        related_name="agendas",
        db_index=False,  # agenda_customer_recent leads with it
    )
    template = models.ForeignKey(
        "agendas.AgendaTemplate",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agendas",
        db_index=False,  # agenda_template below leads with it
    )
    schedule = models.ForeignKey(
        "scheduling.Schedule",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agendas",
        db_index=False,  # agenda_schedule below: the scheduled agendas only
    )
    # A number, not a key: (template, number) names the version (docs/decisions.md).
    template_version = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The number of the template version it was expanded from.",
    )
    insight = models.ForeignKey(
        "resourcepools.Insight", on_delete=models.PROTECT, related_name="agendas"
    )
    operations = models.JSONField()
    params = models.JSONField(default=dict, blank=True)
    priority = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(0), MaxValueValidator(9)]
    )
    max_attempts = models.PositiveSmallIntegerField(
        default=3, validators=[MinValueValidator(1), MaxValueValidator(20)]
    )
    retry_delay_seconds = models.PositiveIntegerField(default=10)
    cost = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001), MaxValueValidator(604800)],
        help_text="Expected execution seconds, charged to the customer's fair share when the "
        "agenda is queued and corrected when it ends; empty = the customer's running mean.",
    )
    callback_url = models.URLField(max_length=1000, blank=True, default="")
    labels = models.JSONField(
        default=dict,
        blank=True,
        help_text="Flat key → text map for finding and acting on sets of agendas "
        "(agendas.labels; on PostgreSQL the GIN index agenda_labels serves `labels @> …`).",
    )
    external_id = models.CharField(max_length=255, blank=True, default="")
    idempotency_key = models.CharField(max_length=255, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="agenda_idempotency_key_per_customer",
            ),
            models.CheckConstraint(condition=Q(priority__lte=9), name="agenda_priority_0_9"),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1, max_attempts__lte=20),
                name="agenda_max_attempts_1_20",
            ),
        ]
        indexes = [
            models.Index(fields=["customer", "-created_at"], name="agenda_customer_recent"),
            # ?ordering=priority (either way), for staff and for a customer.
            models.Index(fields=["priority"], name="agenda_priority"),
            models.Index(fields=["customer", "priority"], name="agenda_customer_priority"),
            # ?template= for staff and for a customer (a global template's agendas belong to
            # many customers: by the template alone, a customer's count read everyone's).
            models.Index(
                fields=["template", "customer", "-created_at"],
                condition=Q(template__isnull=False),
                name="agenda_template",
            ),
            models.Index(
                fields=["schedule"], condition=Q(schedule__isnull=False), name="agenda_schedule"
            ),
            # Exact filters (?link_id=, ?cid=, ?external_id=, the admin's search).
            models.Index(fields=["link_id"], condition=~Q(link_id=""), name="agenda_link_id"),
            models.Index(fields=["cid"], name="agenda_cid"),
            models.Index(
                fields=["external_id"], condition=~Q(external_id=""), name="agenda_external_id"
            ),
        ]

    def __str__(self) -> str:
        return f"agenda {self.pk}"


class AgendaProgress(OwnedModel):
    """The mutable state of one agenda; its `state` is written only by agendas/states/."""

    class State(models.TextChoices):
        PENDING = "pending", "pending"
        READY = "ready", "ready"
        QUEUED = "queued", "queued"
        EXECUTING = "executing", "executing"
        PAUSED = "paused", "paused"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        ABORTED = "aborted", "aborted"

    agenda = models.OneToOneField(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="progress",
        db_constraint=False,  # see AGENDA_HISTORY_LINKS in agendas/states/reap.py
    )
    link_id = link_id_field(db_index=False)
    cid = cid_field(db_index=False)
    customer = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.CASCADE,
        related_name="agenda_progress",
        db_index=False,  # progress_customer_recent and progress_customer_state lead with it
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    message = models.TextField(blank=True, default="")
    percent_complete = models.FloatField(default=0.0)
    attempts_completed = models.PositiveSmallIntegerField(default=0)
    # The attempt begun last (since submit or rerun): attempts_completed + 1 from the moment an
    # execution starts; an execution that ends uncounted (paused, aborted) leaves it there.
    attempts_started = models.PositiveSmallIntegerField(default=0)
    run_after = models.DateTimeField(null=True, blank=True)
    do_not_run = models.BooleanField(default=False)
    abort_requested = models.BooleanField(default=False)
    pause_requested = models.BooleanField(default=False)
    # With pause_requested: stop the running operations at once (their progress is kept).
    pause_now = models.BooleanField(default=False)
    diagnostics = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    current_execution = models.ForeignKey(
        "agendas.Execution",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,  # see AGENDA_HISTORY_LINKS in agendas/states/reap.py
        db_index=False,  # progress_current_execution: the executing rows only
    )
    # Some agenda was submitted to wait for this one (`after`; agendas/states/waits.py): only
    # then does its finish look for waiters to release. Set under this row's lock, never unset.
    has_waiters = models.BooleanField(default=False, db_default=False, editable=False)
    # The number of this agenda's latest execution (0 before its first). A rerun keeps it: the
    # claim numbers the next execution one more without reading the agenda's executions.
    # NULL only on rows older than the column (agendas 0028): the claim reads their executions
    # once and sets it.
    last_execution_number = models.SmallIntegerField(
        null=True, default=0, db_default=0, editable=False
    )

    class Meta:
        verbose_name_plural = "agenda progress"
        ordering = ["-created_at"]
        indexes = [
            # Partial indexes hold only the rows their question asks about, so the hot path's
            # updates (ready → queued → executing → succeeded, never HOT) write no entry in
            # them but one, at the claim (docs/decisions.md, "Two progress indexes hold only
            # the rows they are asked about"). The promote asks for pending rows by run_after;
            # Django's SET_NULL, when executions are deleted through the ORM, for the rows
            # pointing at them: only an executing row points at one.
            models.Index(
                fields=["run_after"],
                name="progress_pending_run_after",
                condition=Q(state="pending"),
            ),
            models.Index(
                fields=["current_execution"],
                name="progress_current_execution",
                condition=Q(current_execution__isnull=False),
            ),
            models.Index(fields=["customer", "state"], name="progress_customer_state"),
            models.Index(fields=["state", "completed_at"], name="progress_state_completed"),
            # The progress list's default order, for a customer (staff read created_at's own).
            models.Index(fields=["customer", "-created_at"], name="progress_customer_recent"),
            models.Index(fields=["link_id"], condition=~Q(link_id=""), name="progress_link_id"),
            # No index on cid: it is the agenda's, and `?cid=` reads the agenda's `agenda_cid`.
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(percent_complete__gte=0, percent_complete__lte=100),
                name="progress_percent_0_100",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agenda_id}: {self.state}"

    @property
    def processing_state(self) -> str:
        if self.state == self.State.EXECUTING:
            return "executing"
        if self.state in (self.State.SUCCEEDED, self.State.FAILED, self.State.ABORTED):
            return "complete"
        return "waiting"


class OperationProgress(models.Model):
    class State(models.TextChoices):
        WAITING = "waiting", "waiting"
        EXECUTING = "executing", "executing"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        ABORTED = "aborted", "aborted"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agenda_progress = models.ForeignKey(
        "agendas.AgendaProgress",
        on_delete=models.CASCADE,
        related_name="operations",
        db_constraint=False,  # see AGENDA_HISTORY_LINKS in agendas/states/reap.py
        db_index=False,  # operation_name_per_agenda leads with it
    )
    customer = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.CASCADE,
        related_name="operation_progress",
        db_index=False,  # operation_customer_recent leads with it
    )
    link_id = link_id_field(db_index=False)
    cid = models.CharField(max_length=64, blank=True, default="")
    position = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=100)
    type = models.CharField(max_length=100)
    state = models.CharField(max_length=20, choices=State.choices, default=State.WAITING)
    message = models.TextField(blank=True, default="")
    percent_complete = models.FloatField(default=0.0)
    attempt_count = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    diagnostics = models.JSONField(default=list, blank=True)
    params = models.JSONField(default=dict, blank=True)
    is_generated = models.BooleanField(
        default=False, help_text="Appended by a worker during execution (generated operation)."
    )
    definition = models.JSONField(
        null=True,
        blank=True,
        help_text=(
            "Generated operations only: the appended {name, type, payload?, depends_on?, "
            "timeout_seconds?, params?}; a retry's pull hands it to the worker with the "
            "submitted operations."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "operation progress"
        ordering = ["agenda_progress_id", "position"]
        # The operation list's default order (newest first, then position), for staff and for
        # a customer: its first page reads 100 index entries, not every operation.
        indexes = [
            models.Index(fields=["-created_at", "position"], name="operation_recent"),
            models.Index(
                fields=["customer", "-created_at", "position"], name="operation_customer_recent"
            ),
            # The list's `state`, `name` and `type` filters, for staff (the leading column) and
            # for a customer (the second), newest first: a filtered page and its capped count
            # read the matching entries only, never the whole history (a state nobody is in, or
            # a type nobody runs, was a scan of every operation). `?cid=` reads the agenda's
            # index: an operation's cid is its agenda's.
            models.Index(fields=["state", "customer", "-created_at"], name="operation_state"),
            models.Index(fields=["name", "customer", "-created_at"], name="operation_name"),
            models.Index(fields=["type", "customer", "-created_at"], name="operation_type"),
            models.Index(fields=["link_id"], condition=~Q(link_id=""), name="operation_link_id"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["agenda_progress", "name"], name="operation_name_per_agenda"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.state}"

    @property
    def generated_definition(self) -> dict | None:
        """A generated operation as the worker runs it (None for a submitted one)."""
        if not self.is_generated:
            return None
        return self.definition or {"name": self.name, "type": self.type}


class Execution(models.Model):
    """One attempt of an agenda, leased to a worker."""

    class Outcome(models.TextChoices):
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"
        ABORTED = "aborted", "aborted"
        PAUSED = "paused", "paused"
        RECLAIMED = "reclaimed", "reclaimed"
        TIMED_OUT = "timed_out", "timed out"
        # The lease ran out without a single report: the pull's answer was most likely lost,
        # so the agenda goes back to the queue without using an attempt.
        UNANSWERED = "unanswered", "never reported"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agenda = models.ForeignKey(
        "agendas.Agenda",
        on_delete=models.CASCADE,
        related_name="executions",
        db_constraint=False,  # see AGENDA_HISTORY_LINKS in agendas/states/reap.py
        db_index=False,  # execution_number_per_agenda leads with it
    )
    customer = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.CASCADE,
        related_name="executions",
        db_index=False,  # execution_customer_window leads with it
    )
    link_id = link_id_field(db_index=False)
    cid = models.CharField(max_length=64, blank=True, default="")
    number = models.PositiveSmallIntegerField()
    insight = models.ForeignKey(
        "resourcepools.Insight",
        on_delete=models.PROTECT,
        related_name="executions",
        db_index=False,  # execution_insight_started leads with it
    )
    worker = models.CharField(max_length=200, blank=True, default="")
    # "<user id>:<request id>" of the pull that leased it: a repeated pull with the same id
    # gets the same executions back instead of new ones (a lost answer is not lost work), and
    # none once they have ended (a request is answered once).
    pull_request = models.CharField(max_length=100, blank=True, default="", db_default="")
    lease_token = models.UUIDField(default=uuid.uuid4, editable=False)
    lease_expires_at = models.DateTimeField()
    started_at = models.DateTimeField()
    last_report_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # NULL (not "") means the attempt is still running; the partial indexes rely on it.
    outcome = models.CharField(  # noqa: DJ001
        max_length=20, choices=Outcome.choices, null=True, blank=True
    )
    diagnostics = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agenda_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["agenda", "number"], name="execution_number_per_agenda"
            ),
        ]
        indexes = [
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(outcome__isnull=True),
                name="execution_open_lease",
            ),
            models.Index(
                fields=["started_at"],
                condition=Q(outcome__isnull=True),
                name="execution_open_start",
            ),
            # What ended lately, per insight and per customer, by outcome (alert rule windows):
            # counted from the index alone, without visiting the rows of a long history.
            # An open execution has no end to count by: the insight's window holds the ended
            # ones only (its insert writes no entry there); the insight's own equality (the
            # PROTECT check of a deleted insight) reads execution_insight_started. The
            # customer's window stays whole: it is the customer's delete cascade's index.
            models.Index(
                fields=["insight", "ended_at", "outcome"],
                name="execution_insight_window",
                condition=Q(ended_at__isnull=False),
            ),
            models.Index(
                fields=["customer", "ended_at", "outcome"], name="execution_customer_window"
            ),
            # Workers seen on an insight lately (the pools page): the last day's starts only.
            models.Index(fields=["insight", "started_at"], name="execution_insight_started"),
            # What is running now, per customer (max_executing) and per insight
            # (execution_limit): counted by the fill and the waiting reason without reading the
            # finished executions of a long history.
            models.Index(
                fields=["customer"],
                condition=Q(outcome__isnull=True),
                name="execution_open_customer",
            ),
            models.Index(
                fields=["insight"],
                condition=Q(outcome__isnull=True),
                name="execution_open_insight",
            ),
            # The executions leased under a pull's request id, open or ended: a repeat gets
            # the open ones, and a request answered before leases nothing more.
            models.Index(
                fields=["pull_request"],
                condition=~Q(pull_request=""),
                name="execution_pull_request",
            ),
            models.Index(fields=["link_id"], condition=~Q(link_id=""), name="execution_link_id"),
        ]

    def __str__(self) -> str:
        return f"execution {self.number} of {self.agenda_id}"
