"""Shapes of customers, members, tokens, pools and insights; rules live in the services."""

from typing import Any

from django.contrib.auth.validators import UnicodeUsernameValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.api.serializers import ApiTokenCreateSerializer, ApiTokenIssuedSerializer
from core.api import JSONValueField, OptionalURLField, ScopedRelatedField
from resourcepools.models import Customer, Insight, Membership, ResourcePool
from resourcepools.selectors import (
    customer_list,
    has_role,
    insight_sharing_customers,
    resource_pool_list,
)

Role = Membership.Role
MAPPER_KEYS = ("operation_type", "operation_name", "param")
KNOWN_MAPPER_KEYS = frozenset({"operationtype", "operationname", "param", "parammap"})
OWNED_READ_ONLY = ("id", "cid", "created_at", "updated_at")


class CustomerSerializer(serializers.ModelSerializer):
    resource_pool = ScopedRelatedField(
        selector=resource_pool_list,
        slug_field="name",
        required=False,
        allow_null=True,
        help_text="Id or name of the pool whose insights this customer's agendas use.",
    )
    callback_url = OptionalURLField(required=False, help_text="Where agenda events are POSTed.")
    callback_secret = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="HMAC key for X-POP-Signature; never shown again.",
    )
    has_callback_secret = serializers.SerializerMethodField()

    class Meta:
        model = Customer
        fields = [
            *OWNED_READ_ONLY,
            "link_id",
            "name",
            "slug",
            "is_active",
            "resource_pool",
            "weight",
            "max_executing",
            "rate_limit",
            "rate_period_seconds",
            "held",
            "callback_url",
            "callback_secret",
            "has_callback_secret",
            "data_ttl_days",
        ]
        read_only_fields = OWNED_READ_ONLY
        extra_kwargs = {
            "slug": {"validators": []},
            "weight": {"min_value": 1},
            "max_executing": {"max_value": 1_000_000},
            "rate_limit": {"min_value": 1, "max_value": 1_000_000},
            "rate_period_seconds": {"min_value": 1, "max_value": 7 * 86_400},
        }

    def get_has_callback_secret(self, customer: Customer) -> bool:
        return bool(customer.callback_secret)


class MembershipSerializer(serializers.ModelSerializer):
    """A member; rows come from `membership_list`, whose `email_hidden` decides `email`."""

    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.SerializerMethodField(
        help_text="The user's e-mail; null when the user also belongs to a customer you do "
        "not administer."
    )

    class Meta:
        model = Membership
        fields = ["id", "customer", "user", "username", "email", "role", "created_at"]
        read_only_fields = fields

    @extend_schema_field({"type": "string", "format": "email", "nullable": True})
    def get_email(self, membership: Membership) -> str | None:
        return None if getattr(membership, "email_hidden", True) else membership.user.email


class MembershipCreateSerializer(serializers.Serializer):
    username = serializers.CharField(
        max_length=150,
        validators=[UnicodeUsernameValidator()],
        help_text="An existing user, or a new one to create.",
    )
    role = serializers.ChoiceField(
        choices=Role.choices, help_text="viewer, submitter, admin, worker."
    )
    email = serializers.EmailField(required=False, default="", help_text="For a new user only.")
    password = serializers.CharField(
        required=False,
        write_only=True,
        min_length=8,
        max_length=128,
        help_text="For a new user only; without it the user can use API tokens only.",
    )


class MembershipUpdateSerializer(serializers.Serializer):
    role = serializers.ChoiceField(
        choices=Role.choices, help_text="viewer, submitter, admin, worker."
    )


TokenSerializer = ApiTokenIssuedSerializer  # {token, id, name, user, username, created, …}


class TokenRequestSerializer(ApiTokenCreateSerializer):
    name = serializers.CharField(
        max_length=100, required=False, default="api", help_text="Token name (default `api`)."
    )


class TokenRevokedSerializer(serializers.Serializer):
    revoked = serializers.IntegerField(help_text="How many tokens were revoked.")


class AuthTokenRequestSerializer(ApiTokenCreateSerializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=128, style={"input_type": "password"})
    name = serializers.CharField(
        max_length=100, required=False, default="login", help_text="Token name (default `login`)."
    )


class ResourcePoolSerializer(serializers.ModelSerializer):
    owner = ScopedRelatedField(
        selector=customer_list, slug_field="slug", help_text="Id or slug of the farm's customer."
    )
    owner_slug = serializers.CharField(source="owner.slug", read_only=True)

    class Meta:
        model = ResourcePool
        fields = [*OWNED_READ_ONLY, "link_id", "owner", "owner_slug", "name", "description"]
        read_only_fields = OWNED_READ_ONLY
        extra_kwargs = {"name": {"validators": []}}


MAPPER_SCHEMA = {
    "type": "object",
    "properties": {key: {"type": "array", "items": {"type": "string"}} for key in MAPPER_KEYS},
}


@extend_schema_field({"oneOf": [MAPPER_SCHEMA, {"type": "array", "items": MAPPER_SCHEMA}]})
class MappersField(JSONValueField):
    """`{"operation_type": [...], "operation_name": [...], "param": ["key=value"]}` (docs/design.md
    §5.1).

    A list of such objects matches when any of them does; POP's camelCase keys
    (`operationType`, `paramMap`) are accepted too.
    """

    def to_internal_value(self, data: Any) -> Any:
        value = super().to_internal_value(data)
        mappers = value if isinstance(value, list) else [value]
        errors = []
        for mapper in mappers:
            if not isinstance(mapper, dict):
                errors.append("Each mapper is an object.")
                continue
            for key, entries in mapper.items():
                entries = [entries] if isinstance(entries, str) else entries
                if str(key).replace("_", "").lower() not in KNOWN_MAPPER_KEYS:
                    errors.append(f"Unknown key {key!r}; expected {', '.join(MAPPER_KEYS)}.")
                elif not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
                    errors.append(f"{key} must be a list of strings.")
        if errors:
            raise serializers.ValidationError(errors)
        return value


class InsightSerializer(serializers.ModelSerializer):
    resource_pool = ScopedRelatedField(
        selector=resource_pool_list, slug_field="name", help_text="Id or name of the pool."
    )
    mappers = MappersField(required=False, help_text="Which operations this insight accepts.")
    allowed_customers = serializers.ListField(
        child=ScopedRelatedField(selector=insight_sharing_customers),
        required=False,
        write_only=True,
        max_length=1000,
        help_text=(
            "Ids of customers that may use this insight besides global/owner rules; "
            "a pool owner's admin names only the pool's customers (staff: any)."
        ),
    )
    allowed_customer_ids = serializers.SerializerMethodField(
        help_text="Customers this insight is shared with; null unless you administer its pool."
    )

    class Meta:
        model = Insight
        fields = [
            *OWNED_READ_ONLY,
            "link_id",
            "resource_pool",
            "name",
            "queue_size",
            "scheduling_algorithm",
            "mappers",
            "order",
            "is_global",
            "allowed_customers",
            "allowed_customer_ids",
            "lease_seconds",
            "max_execution_seconds",
            "execution_limit",
            "rate_limit",
            "rate_period_seconds",
            "usage_half_life_seconds",
            "paused",
        ]
        read_only_fields = OWNED_READ_ONLY
        validators: list = []  # (pool, name) uniqueness is the service's (IntegrityError)
        extra_kwargs = {
            "queue_size": {"min_value": 1, "max_value": 100_000},
            "lease_seconds": {"min_value": 1, "max_value": 86_400},
            "max_execution_seconds": {"min_value": 1, "max_value": 7 * 86_400},
            "execution_limit": {"min_value": 1, "max_value": 1_000_000},
            "rate_limit": {"min_value": 1, "max_value": 1_000_000},
            "rate_period_seconds": {"min_value": 1, "max_value": 7 * 86_400},
            "usage_half_life_seconds": {"min_value": 1, "max_value": 30 * 86_400},
            "order": {"min_value": -1_000_000, "max_value": 1_000_000},
            "is_global": {
                "help_text": "Offered to every customer of the pool and listed to all "
                "customers; only staff change it."
            },
        }

    @extend_schema_field(
        {"type": "array", "items": {"type": "string", "format": "uuid"}, "nullable": True}
    )
    def get_allowed_customer_ids(self, insight: Insight) -> list[str] | None:
        request = self.context.get("request")
        if not has_role(getattr(request, "user", None), insight.resource_pool.owner_id, Role.ADMIN):
            return None
        return [str(customer.pk) for customer in insight.allowed_customers.all()]
