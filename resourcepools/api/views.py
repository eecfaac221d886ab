"""Customers, members and tokens, resource pools and insights (docs/design.md §10, §10.3)."""

import uuid
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.api.serializers import ApiTokenSerializer, issued_data, lifetime_from
from accounts.services import token_issue as api_token_issue
from core.api import CustomerScopedViewSet, PopAPIView, ServiceWritesMixin
from core.throttling import AnonRateThrottle
from resourcepools.api.filters import (
    CustomerFilter,
    InsightFilter,
    MembershipFilter,
    ResourcePoolFilter,
)
from resourcepools.api.serializers import (
    AuthTokenRequestSerializer,
    CustomerSerializer,
    InsightSerializer,
    MembershipCreateSerializer,
    MembershipSerializer,
    MembershipUpdateSerializer,
    ResourcePoolSerializer,
    TokenRequestSerializer,
    TokenRevokedSerializer,
    TokenSerializer,
)
from resourcepools.models import Customer, Membership
from resourcepools.selectors import (
    customer_list,
    insight_list,
    membership_list,
    require_role,
    resource_pool_list,
)
from resourcepools.services import (
    customer_create,
    customer_delete,
    customer_update,
    insight_create,
    insight_delete,
    insight_update,
    member_token_list,
    membership_create,
    membership_delete,
    membership_update,
    resource_pool_create,
    resource_pool_delete,
    resource_pool_update,
    token_issue,
    token_revoke,
)

Role = Membership.Role


@extend_schema(
    tags=["auth"],
    request=AuthTokenRequestSerializer,
    responses={200: TokenSerializer},
    summary="Exchange a username and password for a new named API token (shown once).",
)
class AuthTokenView(PopAPIView):
    """`POST /api/v1/auth/token/`: a new token of the caller (default name `login`)."""

    authentication_classes: list = []
    permission_classes: list = []
    throttle_classes = [AnonRateThrottle]

    def post(self, request: Request) -> Response:
        # The HttpRequest, not DRF's wrapper: django-axes marks a locked-out attempt on the
        # request it is given, and its middleware reads that mark on the HttpRequest.
        credentials = AuthTokenSerializer(data=request.data, context={"request": request._request})
        credentials.is_valid(raise_exception=True)
        named = AuthTokenRequestSerializer(data=request.data)
        named.is_valid(raise_exception=True)
        user = credentials.validated_data["user"]
        issued = api_token_issue(
            principal=user,
            user=user,
            name=named.validated_data["name"],
            lifetime=lifetime_from(named.validated_data),
        )
        return Response(issued_data(issued))


@extend_schema(tags=["customers"])
class CustomerViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Customers: members read their own, staff write; a customer's admin sets its callbacks."""

    selector = staticmethod(customer_list)
    serializer_class = CustomerSerializer
    filterset_class = CustomerFilter
    ordering_fields = ["name", "slug", "created_at"]
    ordering = ["name"]
    create_service = staticmethod(customer_create)
    update_service = staticmethod(customer_update)
    delete_service = staticmethod(customer_delete)
    service_object = "customer"


CUSTOMER_PK = OpenApiParameter(
    "customer_pk", OpenApiTypes.UUID, OpenApiParameter.PATH, description="Customer id."
)
MEMBER_PK = OpenApiParameter(
    "id", OpenApiTypes.INT, OpenApiParameter.PATH, description="Membership id."
)
MEMBER_TOKEN_ID = OpenApiParameter(
    "token_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="API token id."
)


@extend_schema(tags=["customers"], parameters=[CUSTOMER_PK])
@extend_schema_view(
    list=extend_schema(summary="The customer's members (customer admin)."),
    create=extend_schema(
        request=MembershipCreateSerializer,
        responses={201: MembershipSerializer},
        summary=(
            "Add a member; a new username creates the user. Only staff attach a user who "
            "belongs to none of your customers."
        ),
    ),
    retrieve=extend_schema(parameters=[MEMBER_PK]),
    update=extend_schema(
        parameters=[MEMBER_PK],
        request=MembershipUpdateSerializer,
        responses={200: MembershipSerializer},
    ),
    partial_update=extend_schema(
        parameters=[MEMBER_PK],
        request=MembershipUpdateSerializer,
        responses={200: MembershipSerializer},
    ),
    destroy=extend_schema(parameters=[MEMBER_PK], summary="Remove the member."),
)
class MembershipViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet):
    """Members of one customer and their API tokens; its admins (and staff) only."""

    selector = staticmethod(membership_list)
    parent_lookups = {"customer_pk": "customer_id"}
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilter
    ordering_fields = ["created_at", "role"]
    ordering = ["created_at"]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.customer = self._parent_customer()

    def _parent_customer(self) -> Customer:
        try:
            customer = customer_list(principal=self.request.user).get(pk=self.kwargs["customer_pk"])
        except (Customer.DoesNotExist, ValueError, DjangoValidationError) as error:
            raise Http404 from error
        require_role(self.request.user, customer.pk, Role.ADMIN)
        return customer

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = MembershipCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        membership = membership_create(
            principal=request.user, customer=self.customer, **payload.validated_data
        )
        return Response(self._shown(membership), status=status.HTTP_201_CREATED)

    def _shown(self, membership: Membership) -> dict:
        """The member as the list shows it (its e-mail hidden as `membership_list` decides)."""
        return MembershipSerializer(self.get_queryset().get(pk=membership.pk)).data

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = MembershipUpdateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        membership = membership_update(
            principal=request.user, membership=self.get_object(), **payload.validated_data
        )
        return Response(self._shown(membership))

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.update(request, *args, **kwargs)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership_delete(principal=request.user, membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        methods=["POST"],
        parameters=[MEMBER_PK],
        responses={201: TokenSerializer},
        request=TokenRequestSerializer,
        summary="Issue a named API token for the member (replaces their token of that name).",
    )
    @extend_schema(
        methods=["DELETE"],
        parameters=[MEMBER_PK],
        request=None,
        responses={200: TokenRevokedSerializer},
        summary="Revoke all of the member's API tokens.",
    )
    @action(detail=True, methods=["post", "delete"])
    def token(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        if request.method == "DELETE":
            revoked = token_revoke(principal=request.user, membership=membership)
            return Response({"revoked": revoked})
        payload = TokenRequestSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        issued = token_issue(
            principal=request.user,
            membership=membership,
            name=payload.validated_data["name"],
            lifetime=lifetime_from(payload.validated_data),
        )
        return Response(issued_data(issued), status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[MEMBER_PK],
        responses={200: ApiTokenSerializer(many=True)},
        summary="The member's API tokens (never their keys).",
    )
    @action(detail=True, methods=["get"], url_path="tokens")
    def tokens(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        rows = member_token_list(principal=request.user, membership=self.get_object())
        return Response(ApiTokenSerializer(rows, many=True).data)

    @extend_schema(
        parameters=[MEMBER_PK, MEMBER_TOKEN_ID],
        request=None,
        responses={204: None},
        summary="Revoke one of the member's API tokens.",
    )
    @action(detail=True, methods=["delete"], url_path=r"tokens/(?P<token_id>[^/.]+)")
    def revoke_token(self, request: Request, token_id: str, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        try:
            token_id = uuid.UUID(token_id)
        except ValueError as error:
            raise Http404 from error
        if not token_revoke(principal=request.user, membership=membership, token_id=token_id):
            raise Http404
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["resource pools"])
class ResourcePoolViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Resource pools: visible to their owner and their customers; staff create them, the
    owner's admin changes or deletes them (only staff change the owner)."""

    selector = staticmethod(resource_pool_list)
    serializer_class = ResourcePoolSerializer
    filterset_class = ResourcePoolFilter
    ordering_fields = ["name", "created_at"]
    ordering = ["name"]
    create_service = staticmethod(resource_pool_create)
    update_service = staticmethod(resource_pool_update)
    delete_service = staticmethod(resource_pool_delete)
    service_object = "pool"


def insights_with_sharing(*, principal: Any) -> QuerySet:
    """insight_list, with the sharing list loaded for the pool admins' view of it."""
    return insight_list(principal=principal).prefetch_related("allowed_customers")


@extend_schema(tags=["resource pools"])
class InsightViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Insights (queues of a pool): visible per docs/design.md §10.3; the pool owner's admin
    writes, and
    only staff make one global."""

    selector = staticmethod(insights_with_sharing)
    serializer_class = InsightSerializer
    filterset_class = InsightFilter
    ordering_fields = ["name", "order", "created_at"]
    ordering = ["resource_pool__name", "order", "created_at"]
    create_service = staticmethod(insight_create)
    update_service = staticmethod(insight_update)
    delete_service = staticmethod(insight_delete)
    service_object = "insight"
