"""Shapes of schedules, callback deliveries, queue depths and alerts (docs/design.md §3, §8,
§10)."""

from rest_framework import serializers

from agendas.selectors import agenda_template_list
from agendas.template_versions import MAX_VERSION_NUMBER
from core.api import JSONValueField, ScopedRelatedField
from resourcepools.selectors import customer_list
from scheduling.models import Alert, CallbackDelivery, Schedule


class ScheduleSerializer(serializers.ModelSerializer):
    customer = ScopedRelatedField(
        selector=customer_list,
        slug_field="slug",
        required=False,
        help_text="Customer id or slug; required only when you administer several.",
    )
    template = ScopedRelatedField(
        selector=agenda_template_list, help_text="Id of the template each run expands."
    )
    template_version = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_VERSION_NUMBER,
        help_text="Pin each run to this version of the template; null (the default): every run "
        "expands the template's latest version.",
    )
    payload = JSONValueField(required=False, help_text="The run payload (@<pop.payload>).")
    cron = serializers.CharField(
        max_length=200, help_text="Cron expression, e.g. `*/5 * * * *` (minute precision)."
    )
    timezone = serializers.CharField(
        max_length=64, required=False, help_text="IANA zone the cron is read in; default UTC."
    )

    class Meta:
        model = Schedule
        fields = [
            "id",
            "customer",
            "link_id",
            "cid",
            "name",
            "template",
            "template_version",
            "payload",
            "cron",
            "timezone",
            "state",
            "start_at",
            "end_at",
            "next_run_at",
            "last_run_at",
            "catch_up",
            "overlap",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "id",
            "cid",
            "state",
            "next_run_at",
            "last_run_at",
            "created_at",
            "updated_at",
        ]
        validators: list = []  # (customer, name) uniqueness is the service's (IntegrityError)


class CallbackDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = CallbackDelivery
        fields = [
            "id",
            "agenda",
            "customer",
            "link_id",
            "cid",
            "url",
            "event",
            "body",
            "attempts",
            "next_attempt_at",
            "status",
            "last_status_code",
            "last_error",
            "delivered_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class CustomerQueueSerializer(serializers.Serializer):
    customer = serializers.UUIDField(source="customer_id")
    customer_slug = serializers.CharField()
    ready = serializers.IntegerField()
    queued = serializers.IntegerField()
    executing = serializers.IntegerField()


class QueueSerializer(serializers.Serializer):
    insight = serializers.UUIDField(source="insight.pk")
    insight_name = serializers.CharField(source="insight.name")
    resource_pool = serializers.UUIDField(source="insight.resource_pool_id")
    scheduling_algorithm = serializers.CharField(source="insight.scheduling_algorithm")
    queue_size = serializers.IntegerField(source="insight.queue_size")
    execution_limit = serializers.IntegerField(source="insight.execution_limit", allow_null=True)
    rate_limit = serializers.IntegerField(source="insight.rate_limit", allow_null=True)
    rate_period_seconds = serializers.IntegerField(source="insight.rate_period_seconds")
    rate_tokens = serializers.FloatField(
        allow_null=True,
        help_text="Agendas the insight's rate limit lets start now (tokens); null: no limit.",
    )
    ready = serializers.IntegerField(help_text="Eligible agendas not yet queued.")
    queued = serializers.IntegerField(help_text="Agendas in the queue, ready to pull.")
    executing = serializers.IntegerField(help_text="Open executions.")
    oldest_ready_age_seconds = serializers.FloatField(
        allow_null=True, help_text="Age of the oldest ready agenda; null when none."
    )
    customers = CustomerQueueSerializer(
        many=True, help_text="Per customer (your own customers, or all for the pool's owner)."
    )


class AlertSerializer(serializers.ModelSerializer):
    rule_name = serializers.CharField(source="rule.name", read_only=True)
    kind = serializers.CharField(source="rule.kind", read_only=True)
    insight = serializers.UUIDField(source="rule.insight_id", read_only=True, allow_null=True)

    class Meta:
        model = Alert
        fields = [
            "id",
            "rule",
            "rule_name",
            "kind",
            "insight",
            "customer",
            "state",
            "value",
            "message",
            "opened_at",
            "resolved_at",
        ]
        read_only_fields = fields
