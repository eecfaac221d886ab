"""`tokens/`: the caller's own API tokens (staff: everyone's) — list, create, revoke."""

from typing import Any

import django_filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.serializers import (
    ApiTokenCreateSerializer,
    ApiTokenIssuedSerializer,
    ApiTokenSerializer,
    issued_data,
    lifetime_from,
)
from accounts.models import ApiToken
from accounts.selectors import token_list
from accounts.services import token_issue, token_revoke
from core.api import CustomerScopedViewSet

TOKEN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Token id.")


class ApiTokenFilter(django_filters.FilterSet):
    user = django_filters.NumberFilter(field_name="user_id", help_text="User id (staff).")
    name = django_filters.CharFilter(help_text="Exact token name.")

    class Meta:
        model = ApiToken
        fields = ["user", "name"]


@extend_schema(tags=["auth"])
@extend_schema_view(
    list=extend_schema(summary="Your API tokens (staff: everyone's); never their keys."),
    retrieve=extend_schema(parameters=[TOKEN_ID], summary="One API token, without its key."),
    create=extend_schema(
        request=ApiTokenCreateSerializer,
        responses={201: ApiTokenIssuedSerializer},
        summary="Create a named API token for yourself; its key is shown only in this answer.",
    ),
    destroy=extend_schema(parameters=[TOKEN_ID], summary="Revoke an API token."),
)
class ApiTokenViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
    CustomerScopedViewSet,
):  # fmt: skip
    """Named API tokens: a person's CLI, each worker Deployment. Keys are stored hashed."""

    selector = staticmethod(token_list)
    serializer_class = ApiTokenSerializer
    filterset_class = ApiTokenFilter
    ordering_fields = ["created", "expiry", "last_used_at", "name"]
    ordering = ["-created"]

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = ApiTokenCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        issued = token_issue(
            principal=request.user,
            user=request.user,
            name=payload.validated_data["name"],
            lifetime=lifetime_from(payload.validated_data),
        )
        return Response(issued_data(issued), status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: ApiToken) -> None:
        token_revoke(principal=self.request.user, token=instance)
