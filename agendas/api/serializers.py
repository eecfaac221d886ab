"""Shapes of agendas, progress, executions and templates (docs/design.md §3, §5, §9).

Input serializers check types, lengths and formats; the agenda's cross-field rules (DAG,
references, insight mapping) are the services'.
"""

from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from agendas.models import Agenda, AgendaProgress, AgendaTemplate, Execution, OperationProgress
from agendas.outputs import agenda_outputs
from agendas.services import PauseMode, RerunMode
from agendas.states import processing_state
from agendas.states.waits import MAX_LINK_IDS, MAX_UPSTREAMS
from agendas.submit_options import AgendaOptionsSerializer, KeyedAgendaOptionsSerializer
from agendas.template_versions import MAX_VERSION_NUMBER
from agendas.waiting import agenda_after, waiting_reason
from core.api import (
    JSONObjectField,
    JSONValueField,
    OptionalURLField,
    ScopedRelatedField,
    UnknownFieldsRefused,
    reject_unstorable_text,
)
from core.pagination import MAX_OFFSET
from resourcepools.models import Customer, Membership
from resourcepools.selectors import customer_list, has_role

Role = Membership.Role
MAX_OPERATIONS = 1000
MAX_BULK = 1000


def _all_customers(*, principal: Any) -> Any:
    """Customers referenced by id only (allowed_customers): UUIDs are not guessable."""
    return Customer.objects.all()


# --- input ---------------------------------------------------------------------------------


class OperationInputSerializer(UnknownFieldsRefused):
    name = serializers.CharField(
        max_length=100, trim_whitespace=False, help_text="Unique in the agenda (case-insensitive)."
    )
    type = serializers.CharField(
        max_length=100, trim_whitespace=False, help_text="Handler type; picks the insight."
    )
    payload = JSONValueField(required=False, help_text="Handler input; may hold @<…> references.")
    depends_on = serializers.ListField(
        child=serializers.CharField(max_length=100, trim_whitespace=False),
        required=False,
        max_length=MAX_OPERATIONS,
        help_text="Names of operations that must succeed first.",
    )
    timeout_seconds = serializers.IntegerField(
        required=False, min_value=1, max_value=7 * 86_400, help_text="Per-operation time limit."
    )
    params = JSONObjectField(required=False, help_text="Free-form parameters for mapping.")


class AgendaAfterSerializer(UnknownFieldsRefused):
    """Other agendas to wait for (docs/design.md §5.1): it stays pending until they are `on`."""

    agendas = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        max_length=MAX_UPSTREAMS,
        help_text="Ids of the submitting customer's agendas; with link_ids at most "
        f"{MAX_UPSTREAMS} agendas.",
    )
    link_ids = serializers.ListField(
        child=serializers.CharField(max_length=255),
        required=False,
        max_length=MAX_LINK_IDS,
        help_text="Link ids: every agenda of the submitting customer with one of them, now.",
    )
    on = serializers.ChoiceField(
        choices=["succeeded", "completed"],
        default="succeeded",
        help_text="succeeded (default), or completed: succeeded, failed or aborted.",
    )
    on_failure = serializers.ChoiceField(
        choices=["fail", "abort"],
        default="fail",
        help_text="With on: succeeded, what one of them failing or aborted does to this agenda.",
    )


class AgendaSubmitSerializer(AgendaOptionsSerializer):
    """A submission: operations, customer, and the options every way in checks alike."""

    after = AgendaAfterSerializer(
        required=False, help_text="Wait for other agendas before becoming ready."
    )

    operations = OperationInputSerializer(
        many=True, max_length=MAX_OPERATIONS, help_text="1 to 1000 operations."
    )
    customer = ScopedRelatedField(
        selector=customer_list,
        slug_field="slug",
        required=False,
        help_text="Customer id or slug; required only when you submit for several.",
    )


class AgendaBulkItemSerializer(AgendaSubmitSerializer, KeyedAgendaOptionsSerializer):
    """A bulk item: a submission with its own idempotency key."""


@extend_schema_field(AgendaBulkItemSerializer(many=True))
class BulkItemsField(serializers.ListField):
    """Raw items: each is validated on its own so one bad item never fails the others."""

    child = JSONValueField()


class AgendaBulkSerializer(serializers.Serializer):
    agendas = BulkItemsField(min_length=1, max_length=MAX_BULK, help_text="1 to 1000 agendas.")


class AgendaPauseSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(
        choices=PauseMode.ALL,
        default=PauseMode.AFTER_RUNNING,
        help_text="An executing agenda: after_running (its running operations finish) or now "
        "(they are stopped at once, their progress kept for the resume).",
    )


class AgendaRerunSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(
        choices=list(RerunMode.ALL),
        default=RerunMode.CONTINUE,
        help_text="continue: keep finished operations; reset_all; operations_to_reset.",
    )
    operations = serializers.ListField(
        child=serializers.CharField(max_length=100, trim_whitespace=False),
        required=False,
        max_length=MAX_OPERATIONS,
        help_text="For operations_to_reset: these and everything depending on them.",
    )
    skip_execution = serializers.BooleanField(
        default=False, help_text="Reset, but hold the agenda (pending, do not run)."
    )


def template_version_field() -> serializers.IntegerField:
    """`version` of a template run or preview: a number the template has (else 400)."""
    return serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_VERSION_NUMBER,
        help_text="The template version to expand; default: its latest.",
    )


class TemplateRunSerializer(AgendaOptionsSerializer):
    """A run's payload and customer; its options override the template body's."""

    payload = JSONValueField(required=False, default=dict, help_text="Becomes @<pop.payload>.")
    version = template_version_field()
    customer = ScopedRelatedField(
        selector=customer_list,
        slug_field="slug",
        required=False,
        help_text="Customer id or slug; required only when you submit for several.",
    )


class TemplatePreviewSerializer(serializers.Serializer):
    payload = JSONValueField(required=False, default=dict, help_text="Becomes @<pop.payload>.")
    version = template_version_field()


class ProgressSummaryQuerySerializer(serializers.Serializer):
    link_id = serializers.CharField(max_length=255, help_text="The grouping key to summarise.")
    limit = serializers.IntegerField(
        min_value=1,
        max_value=1000,
        default=100,
        help_text="Agendas listed (the summary counts all).",
    )
    offset = serializers.IntegerField(
        min_value=0,
        max_value=MAX_OFFSET,
        default=0,
        help_text="Agendas skipped, oldest first (at most 10,000, as for every list).",
    )


# --- output --------------------------------------------------------------------------------


class OperationProgressSerializer(serializers.ModelSerializer):
    agenda = serializers.UUIDField(source="agenda_progress.agenda_id", read_only=True)

    class Meta:
        model = OperationProgress
        fields = [
            "id",
            "agenda",
            "customer",
            "link_id",
            "cid",
            "position",
            "name",
            "type",
            "state",
            "message",
            "percent_complete",
            "attempt_count",
            "started_at",
            "completed_at",
            "result",
            "diagnostics",
            "params",
            "is_generated",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class AgendaProgressSerializer(serializers.ModelSerializer):
    processing_state = serializers.SerializerMethodField()
    operations = OperationProgressSerializer(many=True, read_only=True)

    class Meta:
        model = AgendaProgress
        fields = [
            "id",
            "agenda",
            "customer",
            "link_id",
            "cid",
            "state",
            "processing_state",
            "message",
            "percent_complete",
            "attempts_completed",
            "attempts_started",
            "run_after",
            "do_not_run",
            "abort_requested",
            "pause_requested",
            "pause_now",
            "diagnostics",
            "started_at",
            "completed_at",
            "current_execution",
            "operations",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_processing_state(self, progress: AgendaProgress) -> str:
        return processing_state(progress.state)


class OutputSerializer(serializers.Serializer):
    """One output an operation declared in its result (`outputs: [{path or url, kind, bytes}]`)."""

    operation = serializers.CharField(help_text="The operation that wrote it.")
    path = serializers.CharField(allow_null=True, help_text="A path on the farm's storage.")
    url = serializers.CharField(allow_null=True, help_text="Where it can be fetched.")
    kind = serializers.CharField(allow_null=True, help_text="e.g. video, image, hls, dash.")
    bytes = serializers.IntegerField(allow_null=True, help_text="Its size, when known.")


class AgendaSerializer(serializers.ModelSerializer):
    customer_slug = serializers.CharField(source="customer.slug", read_only=True)
    insight_name = serializers.CharField(source="insight.name", read_only=True)
    state = serializers.CharField(source="progress.state", read_only=True)
    processing_state = serializers.SerializerMethodField()
    processing_state_message = serializers.CharField(source="progress.message", read_only=True)
    percent_complete = serializers.FloatField(source="progress.percent_complete", read_only=True)
    callback_url = OptionalURLField(read_only=True)
    progress = AgendaProgressSerializer(read_only=True)
    outputs = serializers.SerializerMethodField(
        help_text="What the operations wrote, from each result's `outputs` list."
    )

    class Meta:
        model = Agenda
        fields = [
            "id",
            "customer",
            "customer_slug",
            "template",
            "template_version",
            "schedule",
            "insight",
            "insight_name",
            "link_id",
            "cid",
            "external_id",
            "idempotency_key",
            "operations",
            "params",
            "priority",
            "max_attempts",
            "retry_delay_seconds",
            "cost",
            "labels",
            "callback_url",
            "state",
            "processing_state",
            "processing_state_message",
            "percent_complete",
            "progress",
            "outputs",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_processing_state(self, agenda: Agenda) -> str:
        return processing_state(agenda.progress.state)

    @extend_schema_field(OutputSerializer(many=True))
    def get_outputs(self, agenda: Agenda) -> list[dict[str, Any]]:
        return agenda_outputs(agenda.progress.operations.all())


class WaitingReasonSerializer(serializers.Serializer):
    code = serializers.ChoiceField(
        choices=[
            "paused",
            "do_not_run",
            "run_after",
            "promotion_due",
            "customer_at_max_executing",
            "insight_at_execution_limit",
            "rate_limited",
            "insight_paused",
            "customer_held",
            "ready",
            "queued",
            "moving",
            "waiting_for_agendas",
        ]
    )
    message = serializers.CharField()
    detail = serializers.DictField()


class AgendaDetailSerializer(AgendaSerializer):
    """One agenda, with why it is not executing (null when executing or finished)."""

    waiting_reason = serializers.SerializerMethodField()
    after = serializers.SerializerMethodField(
        help_text="What it waits (or waited) for: the rule, how many are left, the first "
        "20 agendas with their states; null when submitted without `after`."
    )

    class Meta(AgendaSerializer.Meta):
        fields = [*AgendaSerializer.Meta.fields, "waiting_reason", "after"]
        read_only_fields = fields

    @extend_schema_field(WaitingReasonSerializer(allow_null=True))
    def get_waiting_reason(self, agenda: Agenda) -> dict | None:
        return waiting_reason(agenda.progress)

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_after(self, agenda: Agenda) -> dict | None:
        return agenda_after(agenda)


class AgendaBulkAgendaSerializer(serializers.ModelSerializer):
    """A bulk item's agenda, slim: built from what the submit wrote, without reading it back."""

    state = serializers.CharField(source="progress.state", read_only=True)
    processing_state = serializers.SerializerMethodField()

    class Meta:
        model = Agenda
        fields = [
            "id",
            "customer",
            "insight",
            "link_id",
            "external_id",
            "idempotency_key",
            "state",
            "processing_state",
        ]
        read_only_fields = fields

    def get_processing_state(self, agenda: Agenda) -> str:
        return processing_state(agenda.progress.state)


def bulk_agenda_data(agenda: Agenda) -> dict:
    """`AgendaBulkAgendaSerializer(agenda).data`, built straight from the instance the submit
    wrote. A ModelSerializer builds its fields from the model for every `many=True` answer and
    walks them per agenda: a tenth of a bulk submit of 100 through the view (cProfile,
    2026-11-27). The same keys in the same order and the same values (the related ids as the
    UUIDs a `PrimaryKeyRelatedField` gives); a test holds the rendered answers equal."""
    state = agenda.progress.state
    return {
        "id": str(agenda.pk),
        "customer": agenda.customer_id,
        "insight": agenda.insight_id,
        "link_id": agenda.link_id,
        "external_id": agenda.external_id,
        "idempotency_key": agenda.idempotency_key,
        "state": state,
        "processing_state": processing_state(state),
    }


class AgendaBulkErrorSerializer(serializers.Serializer):
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="The item's problems by field path; nothing was written for it.",
    )


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="AgendaBulkResult",
        serializers=[AgendaBulkAgendaSerializer, AgendaBulkErrorSerializer],
        resource_type_field_name=None,
        many=True,
    )
)
class BulkResultsField(serializers.ListField):
    child = JSONValueField()


class AgendaBulkResponseSerializer(serializers.Serializer):
    results = BulkResultsField(help_text="One per submitted item, in order.")


class ExecutionSerializer(serializers.ModelSerializer):
    class Meta:
        model = Execution
        fields = [
            "id",
            "agenda",
            "number",
            "insight",
            "worker",
            "lease_expires_at",
            "started_at",
            "last_report_at",
            "ended_at",
            "outcome",
            "diagnostics",
            "created_at",
        ]
        read_only_fields = fields


class AgendaTemplateSerializer(serializers.ModelSerializer):
    customer = ScopedRelatedField(
        selector=customer_list,
        slug_field="slug",
        required=False,
        help_text="Owner id or slug; required only when you administer several customers.",
    )
    agenda = JSONObjectField(help_text="Agenda body with @<…> references (docs/design.md §5.3).")
    static_parameters = JSONObjectField(required=False, help_text="Names usable as @<key>.")
    payload_schema = JSONValueField(
        required=False, allow_null=True, help_text="JSON Schema the run payload must satisfy."
    )
    allowed_customers = serializers.ListField(
        child=ScopedRelatedField(selector=_all_customers),
        required=False,
        write_only=True,
        max_length=1000,
        help_text="Ids of customers this template is shared with.",
    )
    allowed_customer_ids = serializers.SerializerMethodField(
        help_text="Customers it is shared with; null unless you administer its owner."
    )
    note = serializers.CharField(
        required=False,
        write_only=True,
        max_length=500,
        allow_blank=True,
        validators=[reject_unstorable_text],
        help_text="Why the body, static parameters or payload schema changed: kept with the "
        "version this save adds (none is added when they did not change).",
    )
    latest_version = serializers.SerializerMethodField(
        help_text="The number of its newest version (what a run expands by default); null "
        "when none is recorded."
    )

    class Meta:
        model = AgendaTemplate
        fields = [
            "id",
            "customer",
            "link_id",
            "cid",
            "name",
            "description",
            "agenda",
            "static_parameters",
            "payload_schema",
            "is_global",
            "allowed_customers",
            "allowed_customer_ids",
            "note",
            "latest_version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "cid", "created_at", "updated_at"]
        validators: list = []  # (customer, name) uniqueness is the service's (IntegrityError)

    @extend_schema_field(
        {"type": "array", "items": {"type": "string", "format": "uuid"}, "nullable": True}
    )
    def get_allowed_customer_ids(self, template: AgendaTemplate) -> list[str] | None:
        request = self.context.get("request")
        if not has_role(getattr(request, "user", None), template.customer_id, Role.ADMIN):
            return None
        return [str(customer.pk) for customer in template.allowed_customers.all()]

    @extend_schema_field({"type": "integer", "nullable": True})
    def get_latest_version(self, template: AgendaTemplate) -> int | None:
        # Lists annotate it (agendas.api.views.templates_with_sharing); a saved row asks.
        if hasattr(template, "latest_version"):
            return template.latest_version
        return template.versions.order_by("-number").values_list("number", flat=True).first()


class TemplatePreviewResponseSerializer(serializers.Serializer):
    agenda = JSONObjectField(help_text="The expanded agenda body a run would submit.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="What a run would refuse, by field path; empty when it would be accepted.",
    )
    version = serializers.IntegerField(
        allow_null=True,
        help_text="The template version expanded (null: a template saved without versions).",
    )


class ProgressSummaryAgendaSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=AgendaProgress.State.choices)
    percent = serializers.FloatField()


class ProgressSummarySerializer(serializers.Serializer):
    link_id = serializers.CharField()
    processing_state = serializers.ChoiceField(choices=["waiting", "executing", "complete"])
    percent_complete = serializers.FloatField()
    counts = serializers.DictField(
        child=serializers.IntegerField(), help_text="Number of agendas per state."
    )
    total = serializers.IntegerField(help_text="Agendas in the group (all of them).")
    agendas = ProgressSummaryAgendaSerializer(
        many=True, help_text="A page of the group's agendas, oldest first (`limit`, `offset`)."
    )
