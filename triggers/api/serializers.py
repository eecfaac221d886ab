"""Shapes of triggers and their firings (docs/design.md §5.4). The secret is write-never:
only the create and rotate-secret answers carry it (TriggerWithSecretSerializer)."""

from rest_framework import serializers

from agendas.selectors import agenda_template_list
from agendas.template_versions import MAX_VERSION_NUMBER
from core.api import JSONObjectField, JSONValueField, ScopedRelatedField
from resourcepools.selectors import customer_list
from triggers.events import MAX_POINTER
from triggers.models import Trigger, TriggerFiring


class TriggerSerializer(serializers.ModelSerializer):
    customer = ScopedRelatedField(
        selector=customer_list,
        slug_field="slug",
        required=False,
        help_text="Customer id or slug; required only when you administer several.",
    )
    template = ScopedRelatedField(
        selector=agenda_template_list, help_text="Id of the template each firing runs."
    )
    template_version = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_VERSION_NUMBER,
        help_text="Pin each firing to this version of the template; null (the default): the "
        "latest version at each firing.",
    )
    payload_mapping = JSONValueField(
        required=False,
        help_text="The run payload, with `@</json/pointer>` (or `@<event::/json/pointer>`, "
        "`?fallback` as in templates) taking values from the event.",
    )
    filter = JSONValueField(
        required=False,
        help_text='Conditions the event must all meet, at most 16: `[{"pointer": "/a/b", '
        '"equals": "x"} | {"pointer": "/a/b", "prefix": "x"}]`; a miss answers 200 skipped.',
    )
    labels = JSONObjectField(required=False, help_text="Labels set on every agenda it submits.")
    event_id_pointer = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=MAX_POINTER,
        help_text="JSON pointer to the event's id: a second event with that id is a duplicate.",
    )
    fire_url = serializers.SerializerMethodField(help_text="Where to POST signed events.")

    class Meta:
        model = Trigger
        fields = [
            "id",
            "customer",
            "link_id",
            "cid",
            "name",
            "template",
            "template_version",
            "payload_mapping",
            "filter",
            "labels",
            "event_id_pointer",
            "enabled",
            "fire_url",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "cid", "created_at", "updated_at"]
        validators: list = []  # (customer, name) uniqueness is the service's (IntegrityError)

    def get_fire_url(self, trigger: Trigger) -> str:
        path = f"/api/v1/triggers/{trigger.pk}/fire/"
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path


class TriggerWithSecretSerializer(TriggerSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="The HMAC key; shown here once, never listed afterwards."
    )

    class Meta(TriggerSerializer.Meta):
        fields = [*TriggerSerializer.Meta.fields, "secret"]


class TriggerFiringSerializer(serializers.ModelSerializer):
    class Meta:
        model = TriggerFiring
        fields = [
            "id",
            "trigger",
            "received_at",
            "status",
            "reason",
            "agenda",
            "idempotency_key",
            "event_id",
            "event",
            "event_truncated",
            "cid",
        ]
        read_only_fields = fields


class FireAnswerSerializer(serializers.Serializer):
    """The fire endpoint's answer (201 submitted; 200 duplicate or skipped)."""

    status = serializers.ChoiceField(choices=["submitted", "duplicate", "skipped"])
    firing = serializers.UUIDField()
    agenda = serializers.UUIDField(allow_null=True, required=False)
    reason = serializers.CharField(required=False)
