"""Customers, members and tokens, resource pools and insights (DESIGN §8, §9)."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.authtoken.models import Token
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle

from popsite.api import CustomerScopedViewSet, PopAPIView, ServiceWritesMixin
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
    summary="Exchange a username and password for an API token.",
)
class AuthTokenView(PopAPIView):
    """`POST /api/v1/auth/token/`: the caller's token, created on first use."""

    authentication_classes: list = []
    permission_classes: list = []
    throttle_classes = [AnonRateThrottle]

    def post(self, request: Request) -> Response:
        credentials = AuthTokenSerializer(data=request.data, context={"request": request})
        credentials.is_valid(raise_exception=True)
        token, _ = Token.objects.get_or_create(user=credentials.validated_data["user"])
        return Response({"token": token.key, "username": token.user.get_username()})


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


@extend_schema(tags=["customers"], parameters=[CUSTOMER_PK])
@extend_schema_view(
    list=extend_schema(summary="The customer's members (customer admin)."),
    create=extend_schema(
        request=MembershipCreateSerializer,
        responses={201: MembershipSerializer},
        summary="Add a member; a new username creates the user.",
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
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        payload = MembershipUpdateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        membership = membership_update(
            principal=request.user, membership=self.get_object(), **payload.validated_data
        )
        return Response(MembershipSerializer(membership).data)

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.update(request, *args, **kwargs)

    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership_delete(principal=request.user, membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        methods=["POST"],
        parameters=[MEMBER_PK],
        request=None,
        responses={201: TokenSerializer},
        summary="Issue a new API token for the member (replaces the old one).",
    )
    @extend_schema(
        methods=["DELETE"],
        parameters=[MEMBER_PK],
        request=None,
        responses={200: TokenRevokedSerializer},
        summary="Revoke the member's API token.",
    )
    @action(detail=True, methods=["post", "delete"])
    def token(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        membership = self.get_object()
        if request.method == "DELETE":
            revoked = token_revoke(principal=request.user, membership=membership)
            return Response({"revoked": revoked})
        token = token_issue(principal=request.user, membership=membership)
        return Response(
            {"token": token.key, "username": membership.user.get_username()},
            status=status.HTTP_201_CREATED,
        )


@extend_schema(tags=["resource pools"])
class ResourcePoolViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Resource pools: visible to their owner and their customers; the owner's admin writes."""

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
    """Insights (queues of a pool): visible per DESIGN §9; the pool owner's admin writes."""

    selector = staticmethod(insights_with_sharing)
    serializer_class = InsightSerializer
    filterset_class = InsightFilter
    ordering_fields = ["name", "order", "created_at"]
    ordering = ["resource_pool__name", "order", "created_at"]
    create_service = staticmethod(insight_create)
    update_service = staticmethod(insight_update)
    delete_service = staticmethod(insight_delete)
    service_object = "insight"
