from rest_framework import serializers

from audit.models import AuditEvent
from core.api import JSONObjectField


class AuditEventSerializer(serializers.ModelSerializer):
    user = serializers.CharField(
        source="username", read_only=True, help_text='Username of the actor, or "system".'
    )
    detail = JSONObjectField(read_only=True, help_text="Small facts: counts, ids, field names.")

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "customer",
            "user",
            "token_name",
            "action",
            "target_type",
            "target_id",
            "detail",
            "address",
            "cid",
        ]
        read_only_fields = fields
