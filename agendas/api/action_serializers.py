"""Shapes of `agendas/actions/`: actions on every agenda a filter matches (docs/design.md §7.4)."""

from drf_spectacular.utils import OpenApiExample
from rest_framework import serializers

from agendas.action_models import AgendaActionJob
from agendas.bulk_actions import MAX_IDS
from core.api import JSONObjectField


class AgendaActionRequestSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=AgendaActionJob.Action.choices)
    filter = JSONObjectField(
        required=False,
        help_text="The agenda list's filters, as in its query: state (a list), label (a list of "
        "key:value), link_id, cid, customer, insight, template, schedule, external_id, "
        "id_prefix, created_after, created_before. At least one.",
    )
    ids = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        max_length=MAX_IDS,
        help_text="Agenda ids, instead of a filter.",
    )
    mode = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=32,
        help_text="rerun: continue (default) or reset_all.",
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="Only count what matches and what would change."
    )


class AgendaActionPreviewSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    action = serializers.CharField()
    matched = serializers.IntegerField(help_text="Agendas the selection matches now.")
    would_change = serializers.IntegerField(help_text="Of those, the ones the action changes.")


class AgendaActionJobSerializer(serializers.ModelSerializer):
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    skipped = serializers.DictField(
        child=serializers.IntegerField(), help_text="Reason → agendas skipped for it."
    )
    done = serializers.SerializerMethodField()

    class Meta:
        model = AgendaActionJob
        fields = [
            "id",
            "action",
            "mode",
            "selection",
            "status",
            "done",
            "matched",
            "processed",
            "changed",
            "skipped",
            "error",
            "requested_by",
            "created_at",
            "updated_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_done(self, job: AgendaActionJob) -> bool:
        return job.status != AgendaActionJob.Status.RUNNING


ACTION_EXAMPLES = [
    OpenApiExample(
        "Rerun the failed agendas of a template since 14:00 (dry run)",
        value={
            "action": "rerun",
            "filter": {
                "state": ["failed"],
                "template": "5b0c3f52-3f43-4a8e-9f0b-3c1f8f5e2a10",
                "created_after": "2026-11-26T14:00:00Z",
            },
            "mode": "continue",
            "dry_run": True,
        },
        request_only=True,
    ),
    OpenApiExample(
        "Abort what a batch still has running or waiting",
        value={"action": "abort", "filter": {"label": ["batch:42"], "link_id": "show-17"}},
        request_only=True,
    ),
]
