"""Shapes of API tokens: the key appears only in the answer that creates it."""

from datetime import timedelta

from rest_framework import serializers

from accounts.models import ApiToken
from accounts.services import IssuedToken, Lifetime

MAX_LIFETIME_DAYS = 3650


class ApiTokenSerializer(serializers.ModelSerializer):
    """A token as listed: never its key, nor its hash."""

    username = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = ApiToken
        fields = ["id", "name", "user", "username", "created", "expiry", "last_used_at"]
        read_only_fields = fields


class ApiTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=100, help_text="What will use it: `laptop`, `worker-farm-a`."
    )
    expires_in_days = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_LIFETIME_DAYS,
        help_text="Lifetime in days; null: never expires; omitted: the server's default "
        "(POP_TOKEN_TTL_DAYS).",
    )


class ApiTokenIssuedSerializer(ApiTokenSerializer):
    """A new token with its key, which is shown this once."""

    token = serializers.CharField(
        read_only=True, help_text="Send as `Authorization: Token <token>`; shown only once."
    )

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", *ApiTokenSerializer.Meta.fields]
        read_only_fields = fields


def issued_data(issued: IssuedToken) -> dict:
    """The answer to a token creation: the listed fields plus the key."""
    return {"token": issued.key, **ApiTokenSerializer(issued.token).data}


def lifetime_from(validated_data: dict) -> timedelta | None | Lifetime:
    """`expires_in_days` as a service lifetime: omitted → default, null → never expires."""
    if "expires_in_days" not in validated_data:
        return Lifetime.DEFAULT
    days = validated_data["expires_in_days"]
    return None if days is None else timedelta(days=days)
