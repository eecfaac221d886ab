"""Shapes of the puller API: pull, report, batch report, generated operations (docs/design.md
§6.3–§6.4)."""

from datetime import datetime, tzinfo

from django.conf import settings
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from agendas.api.serializers import OperationInputSerializer
from agendas.models import Agenda, Execution, OperationProgress
from agendas.states.operation_rows import PULLED_OPERATION_FIELDS
from core.api import JSONObjectField, JSONValueField
from scheduling.pull import MAX_PULL_COUNT, MAX_WAIT_SECONDS, PulledAgenda
from scheduling.report import MAX_BATCH_REPORTS, REPORT_OUTCOMES

OPERATION_STATES = [choice for choice, _ in OperationProgress.State.choices]


# --- input ---------------------------------------------------------------------------------


class PullRequestSerializer(serializers.Serializer):
    count = serializers.IntegerField(
        default=1, min_value=1, max_value=MAX_PULL_COUNT, help_text="Agendas wanted, 1 to 100."
    )
    worker = serializers.CharField(
        default="", allow_blank=True, max_length=200, help_text="Name of the puller, for humans."
    )
    wait_seconds = serializers.FloatField(
        default=0.0,
        min_value=0.0,
        max_value=MAX_WAIT_SECONDS,
        help_text="Long-poll up to this long (0 to 20 s) when the queue is empty.",
    )
    request_id = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=64,
        help_text="Chosen by the puller, new for every pull; repeating a pull with the same id "
        "(its answer was lost) returns the executions the first one leased that are still open, "
        "never new ones: an id is answered once.",
    )


class DiagnosticInputSerializer(serializers.Serializer):
    time = serializers.CharField(required=False, allow_blank=True, max_length=64)
    message = serializers.CharField(allow_blank=True, max_length=10_000)
    code = serializers.CharField(required=False, allow_blank=True, max_length=100)
    detail = JSONValueField(required=False, allow_null=True)


class OperationReportSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, help_text="An operation of the agenda.")
    state = serializers.ChoiceField(choices=OPERATION_STATES, required=False)
    percent_complete = serializers.FloatField(required=False, min_value=0.0, max_value=100.0)
    message = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
    result = JSONValueField(required=False, allow_null=True, help_text="The operation's output.")
    diagnostics = DiagnosticInputSerializer(many=True, required=False, max_length=100)
    params = JSONObjectField(required=False, help_text="Handler resume state.")
    retryable = serializers.BooleanField(
        required=False,
        help_text="false on a failed operation: retrying cannot help (a missing input, an "
        "unknown type); the agenda fails without using its remaining attempts.",
    )


class ReportSerializer(serializers.Serializer):
    """A sparse report: every field is optional; an empty body is a heartbeat."""

    percent_complete = serializers.FloatField(required=False, min_value=0.0, max_value=100.0)
    message = serializers.CharField(required=False, allow_blank=True, max_length=10_000)
    operations = OperationReportSerializer(many=True, required=False, max_length=1000)
    state = serializers.ChoiceField(
        choices=sorted(REPORT_OUTCOMES),
        required=False,
        help_text="Final outcome of this execution.",
    )
    diagnostics = DiagnosticInputSerializer(many=True, required=False, max_length=100)
    retryable = serializers.BooleanField(
        required=False,
        help_text="With state `failed`: false when retrying cannot help; the agenda goes "
        "straight to failed whatever attempts remain.",
    )


class BatchReportItemSerializer(ReportSerializer):
    execution = serializers.UUIDField(help_text="Execution id.")
    lease_token = serializers.CharField(max_length=64, help_text="The execution's lease token.")


class BatchReportSerializer(serializers.Serializer):
    # Items are validated one by one in the view, so one malformed item fails alone.
    reports = serializers.ListField(
        child=serializers.DictField(),
        min_length=1,
        max_length=MAX_BATCH_REPORTS,
        help_text=f"1 to {MAX_BATCH_REPORTS} reports, each shaped like BatchReportItem.",
    )


class GeneratedOperationSerializer(OperationInputSerializer):
    """An operation generated while running: the same fields and rules as a submitted one."""


class AddOperationsSerializer(serializers.Serializer):
    operations = GeneratedOperationSerializer(many=True, min_length=1, max_length=1000)


# --- output --------------------------------------------------------------------------------


class PulledOperationSerializer(serializers.ModelSerializer):
    class Meta:
        model = OperationProgress
        fields = list(PULLED_OPERATION_FIELDS)  # what the claim loads of each operation
        read_only_fields = fields


class PulledProgressSerializer(serializers.Serializer):
    state = serializers.CharField()
    attempts_completed = serializers.IntegerField()
    percent_complete = serializers.FloatField()
    message = serializers.CharField()
    operations = PulledOperationSerializer(many=True, help_text="What a retry resumes from.")


class PulledAgendaBodySerializer(serializers.ModelSerializer):
    customer_slug = serializers.CharField(source="customer.slug")

    class Meta:
        model = Agenda
        fields = [
            "id",
            "customer",
            "customer_slug",
            "insight",
            "link_id",
            "cid",
            "external_id",
            "operations",
            "params",
            "priority",
            "max_attempts",
            "retry_delay_seconds",
            "created_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "operations": {
                "help_text": "The operations to run: the submitted ones, then those generated "
                "by earlier attempts (their progress says which already succeeded)."
            }
        }


def lease_seconds(execution: Execution) -> int:
    """How long the lease given with the pull lasts: a worker times it on its own clock from
    when it sent the pull, whatever the two clocks say (popclient/worker.py)."""
    return round((execution.lease_expires_at - execution.started_at).total_seconds())


class LeaseSerializer(serializers.ModelSerializer):
    lease_seconds = serializers.SerializerMethodField(
        help_text="The lease's length; each report renews it for as long."
    )

    class Meta:
        model = Execution
        fields = ["id", "lease_token", "lease_expires_at", "lease_seconds", "number"]
        read_only_fields = fields

    def get_lease_seconds(self, execution: Execution) -> int:
        return lease_seconds(execution)


class PulledItemSerializer(serializers.Serializer):
    agenda = PulledAgendaBodySerializer()
    progress = PulledProgressSerializer(source="prior_progress")
    execution = LeaseSerializer()

    def to_representation(self, instance: PulledAgenda) -> dict:
        data = super().to_representation(instance)
        data["agenda"]["operations"] = instance.operations_to_run
        return data


class PullResponseSerializer(serializers.Serializer):
    """The pull's answer as documented; `pull_response_data` writes it (same output, faster)."""

    agendas = PulledItemSerializer(many=True)


_DATETIME = serializers.DateTimeField()
_OPERATION_FIELDS = PulledOperationSerializer.Meta.fields


def pull_response_data(pulled: list[PulledAgenda]) -> dict:
    """`PullResponseSerializer({"agendas": pulled}).data`, built straight from the pulled rows.

    The pull is the hottest read of the API, and DRF builds a ModelSerializer's fields from
    the model on every instantiation: for a pull of 10 that cost more than the rendering
    (bench.profile). Datetimes go through DRF's own field; a test holds both outputs equal.
    """
    zone = _answer_zone()
    return {"agendas": [_pulled_item(item, zone) for item in pulled]}


def _answer_zone() -> tzinfo | None:
    """The time zone DRF's DateTimeField writes in (none without USE_TZ)."""
    return timezone.get_current_timezone() if settings.USE_TZ else None


def _datetime_text(value, zone: tzinfo | None) -> str:
    """`serializers.DateTimeField().to_representation(value)`, in the current time zone `zone`
    read once per answer: DRF reads it for every value through a context-local look-up (18 µs
    a value against 4.5 here, 2026-11-28). A value DRF would treat otherwise (naive, not a
    datetime, another output format) goes to DRF's field itself."""
    output = getattr(_DATETIME, "format", api_settings.DATETIME_FORMAT)
    if (
        zone is None
        or type(value) is not datetime
        or value.utcoffset() is None
        or not isinstance(output, str)
        or output.lower() != ISO_8601
    ):
        return _DATETIME.to_representation(value)
    text = value.astimezone(zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _pulled_item(item: PulledAgenda, zone: tzinfo | None) -> dict:
    agenda, progress, execution = item.agenda, item.progress, item.execution
    return {
        "agenda": {
            "id": str(agenda.pk),
            "customer": str(agenda.customer_id),
            "customer_slug": agenda.customer.slug,
            "insight": str(agenda.insight_id),
            "link_id": agenda.link_id,
            "cid": agenda.cid,
            "external_id": agenda.external_id,
            "operations": item.operations_to_run,
            "params": agenda.params,
            "priority": agenda.priority,
            "max_attempts": agenda.max_attempts,
            "retry_delay_seconds": agenda.retry_delay_seconds,
            "created_at": _datetime_text(agenda.created_at, zone),
        },
        "progress": {
            "state": progress.state,
            "attempts_completed": progress.attempts_completed,
            "percent_complete": float(progress.percent_complete),
            "message": progress.message,
            "operations": [
                {name: getattr(operation, name) for name in _OPERATION_FIELDS}
                | {"percent_complete": float(operation.percent_complete)}
                for operation in item.operations
            ],
        },
        "execution": {
            "id": str(execution.pk),
            "lease_token": str(execution.lease_token),
            "lease_expires_at": _datetime_text(execution.lease_expires_at, zone),
            "lease_seconds": lease_seconds(execution),
            "number": execution.number,
        },
    }


class ReportAnswerSerializer(serializers.Serializer):
    abort = serializers.BooleanField(help_text="Stop now: the agenda was aborted.")
    pause = serializers.BooleanField(help_text="Stop after the running operations: pause asked.")
    pause_now = serializers.BooleanField(
        help_text="With pause: stop the running operations at once, keeping their progress."
    )
    lease_expires_at = serializers.DateTimeField(
        allow_null=True, help_text="Report again before this; null once the execution ended."
    )
    state = serializers.CharField(help_text="The agenda's state after this report.")


class BatchReportResultSerializer(serializers.Serializer):
    execution = serializers.CharField(allow_null=True)
    ok = serializers.BooleanField()
    status = serializers.IntegerField(help_text="The HTTP status this report would have had.")
    abort = serializers.BooleanField(required=False)
    pause = serializers.BooleanField(required=False)
    pause_now = serializers.BooleanField(required=False)
    lease_expires_at = serializers.DateTimeField(required=False, allow_null=True)
    state = serializers.CharField(required=False)
    detail = serializers.CharField(required=False)
    current_state = serializers.CharField(required=False)
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()), required=False
    )


class BatchReportResponseSerializer(serializers.Serializer):
    results = BatchReportResultSerializer(many=True, help_text="One per report, in order.")


def batch_report_response_data(results: list[dict]) -> dict:
    """`BatchReportResponseSerializer({"results": results}).data`, built straight from the
    view's result dicts (a serializer per answer deep-copied its fields and walked them for
    every result: 7% of a pull of 10 and its batch report through the views, cProfile,
    2026-11-27). It walks BatchReportResultSerializer's own fields, built once: the same keys
    in the same order and the same representations; an absent key is left out, but null for a
    field that allows null, as the serializer writes it. A test holds both equal."""
    zone = _answer_zone()
    return {"results": [_represented(_RESULT_FIELDS, result, zone) for result in results]}


def report_answer_data(answer) -> dict:
    """`ReportAnswerSerializer(answer).data`, built from ReportAnswerSerializer's own fields
    (built once) as `batch_report_response_data` builds its results. The report endpoint
    answers every heartbeat with it (a serializer per answer deep-copied its fields). A test
    holds both equal."""
    return _represented(_ANSWER_FIELDS, vars(answer), _answer_zone())


def _represented(fields: tuple, values: dict, zone: tzinfo | None) -> dict:
    """What a serializer of `fields` writes for `values`: each present key's representation
    (null for None), in the fields' order; an absent key left out, or null where it may be.
    A datetime field's in `zone` (`_datetime_text`)."""
    item: dict = {}
    for name, field, is_datetime in fields:
        if name in values:
            value = values[name]
            if value is None:
                item[name] = None
            elif is_datetime:
                item[name] = _datetime_text(value, zone)
            else:
                item[name] = field.to_representation(value)
        elif field.allow_null:
            item[name] = None
    return item


def _fields_of(serializer: serializers.Serializer) -> tuple:
    """(name, field, whether `_datetime_text` writes it: a DateTimeField of DRF's own, with
    neither a time zone nor an output format of its own) of `serializer`'s fields."""
    return tuple(
        (
            name,
            field,
            type(field) is serializers.DateTimeField
            and not hasattr(field, "timezone")
            and not hasattr(field, "format"),
        )
        for name, field in serializer.fields.items()
    )


_RESULT_FIELDS = _fields_of(BatchReportResultSerializer())
_ANSWER_FIELDS = _fields_of(ReportAnswerSerializer())


class AddOperationsResponseSerializer(serializers.Serializer):
    operations = PulledOperationSerializer(many=True)
