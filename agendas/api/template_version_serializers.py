"""Shapes of template versions and their diffs (docs/design.md §5.3)."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agendas.models import AgendaTemplateVersion
from agendas.template_versions import MAX_VERSION_NUMBER
from resourcepools.models import Membership
from resourcepools.selectors import has_role


class TemplateVersionSerializer(serializers.ModelSerializer):
    """A version in the list: who saved it, when and why (its fields: the version itself)."""

    author = serializers.SerializerMethodField(
        help_text="Who saved it; null for the scheduler, a migration or a deleted user, and "
        "unless you are a member of the template's owner."
    )

    class Meta:
        model = AgendaTemplateVersion
        fields = ["number", "author", "note", "created_at"]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "nullable": True})
    def get_author(self, version: AgendaTemplateVersion) -> str | None:
        # A shared template's readers see its history, not the names of the owner's people.
        # The view passes the template (one for every row) and the request in the context.
        user = self.context["request"].user
        owner = self.context["template"].customer_id
        if version.author is None or not has_role(user, owner, Membership.Role.VIEWER):
            return None
        return version.author.get_username()


class TemplateVersionDetailSerializer(TemplateVersionSerializer):
    """A version with what a run of it expands."""

    class Meta(TemplateVersionSerializer.Meta):
        fields = [
            *TemplateVersionSerializer.Meta.fields,
            "agenda",
            "static_parameters",
            "payload_schema",
        ]
        read_only_fields = fields


def _number(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(min_value=1, max_value=MAX_VERSION_NUMBER, help_text=help_text)


class TemplateVersionDiffQuerySerializer(serializers.Serializer):
    """`?from=A&to=B` (`from` is a Python keyword, hence the fields are built by name)."""

    def get_fields(self) -> dict[str, Any]:
        return {
            "from": _number("The older side: a version number of the template."),
            "to": _number("The newer side: a version number of the template."),
        }


class TemplateVersionDiffSerializer(serializers.Serializer):
    def get_fields(self) -> dict[str, Any]:
        return {
            "from": serializers.IntegerField(help_text="The version compared from."),
            "to": serializers.IntegerField(help_text="The version compared to."),
            "changed": serializers.BooleanField(help_text="Whether the two versions differ."),
            "diff": serializers.ListField(
                child=serializers.CharField(),
                help_text="Unified diff lines (3 lines of context) of the versioned fields as "
                "JSON with sorted keys and indent 2; empty when nothing changed.",
            ),
        }
