from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from core.models import OwnedModel


class Customer(OwnedModel):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    resource_pool = models.ForeignKey(
        "resourcepools.ResourcePool",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="customers",
        help_text="The pool whose insights this customer's agendas use.",
    )
    weight = models.PositiveIntegerField(
        default=1, validators=[MinValueValidator(1)], help_text="Fair-share weight (≥1)."
    )
    max_executing = models.PositiveIntegerField(
        null=True, blank=True, help_text="Cap on queued + executing agendas; empty = no cap."
    )
    rate_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="At most this many agendas started (queued by a fill) per rate period, on "
        "all insights together; empty = no limit.",
    )
    held = models.BooleanField(
        default=False,
        help_text="Held: none of its agendas is queued (they stay ready) until released.",
    )
    rate_period_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)], help_text="The rate limit's period."
    )
    callback_url = models.URLField(max_length=1000, blank=True, default="")
    callback_secret = models.CharField(max_length=200, blank=True, default="")
    data_ttl_days = models.PositiveIntegerField(default=30, validators=[MinValueValidator(1)])

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=1), name="customer_weight_positive"),
            models.CheckConstraint(condition=Q(data_ttl_days__gte=1), name="customer_ttl_positive"),
        ]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer", "viewer"
        SUBMITTER = "submitter", "submitter"
        ADMIN = "admin", "admin"
        WORKER = "worker", "worker"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    customer = models.ForeignKey(
        "resourcepools.Customer", on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["customer_id", "user_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "customer"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.customer} ({self.role})"


class ResourcePool(OwnedModel):
    owner = models.ForeignKey(
        "resourcepools.Customer",
        on_delete=models.PROTECT,
        related_name="owned_pools",
        help_text="The customer that runs the farm.",
    )
    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Insight(OwnedModel):
    class Algorithm(models.TextChoices):
        ROUND_ROBIN = "round_robin", "round robin"
        FIFO = "fifo", "first in, first out"
        WEIGHTED_FAIR = "weighted_fair", "weighted fair"
        FAIR_SHARE = "fair_share", "fair share of execution time"

    resource_pool = models.ForeignKey(
        "resourcepools.ResourcePool", on_delete=models.CASCADE, related_name="insights"
    )
    name = models.CharField(max_length=200)
    queue_size = models.PositiveIntegerField(
        default=10, validators=[MinValueValidator(1)], help_text="Queue depth kept filled."
    )
    scheduling_algorithm = models.CharField(
        max_length=20,
        choices=Algorithm.choices,
        default=Algorithm.FAIR_SHARE,
        help_text="fair_share (default): execution time by weight; round_robin: turns; "
        "weighted_fair: turns by weight; fifo: oldest first.",
    )
    mappers = models.JSONField(
        default=dict,
        blank=True,
        help_text='e.g. {"operation_type": ["mediaInfo"], "operation_name": [], "param": ["k=v"]}',
    )
    order = models.IntegerField(default=0, help_text="Tie-break between matching insights.")
    is_global = models.BooleanField(default=False)
    allowed_customers = models.ManyToManyField(
        "resourcepools.Customer", blank=True, related_name="allowed_insights"
    )
    lease_seconds = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    max_execution_seconds = models.PositiveIntegerField(
        default=3600, validators=[MinValueValidator(1)]
    )
    execution_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Max agendas executing at once; empty = none."
    )
    rate_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="At most this many agendas started (queued) per rate period; empty = none.",
    )
    paused = models.BooleanField(
        default=False,
        help_text="Paused: its queue is not filled and pulls get nothing; executing work finishes.",
    )
    rate_period_seconds = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)], help_text="The rate limit's period."
    )
    usage_half_life_seconds = models.PositiveIntegerField(
        default=3600,
        validators=[MinValueValidator(1)],
        help_text="Fair share: execution time used this long ago counts half.",
    )

    class Meta:
        ordering = ["resource_pool_id", "order", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["resource_pool", "name"], name="insight_name_in_pool"),
            models.CheckConstraint(condition=Q(queue_size__gte=1), name="insight_queue_size_pos"),
            models.CheckConstraint(condition=Q(lease_seconds__gte=1), name="insight_lease_pos"),
        ]

    def __str__(self) -> str:
        return self.name
