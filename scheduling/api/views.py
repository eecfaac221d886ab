"""Schedules, callback deliveries, queue depths and alerts (docs/design.md §8, §10)."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agendas.api.serializers import AgendaSerializer
from agendas.api.views import agenda_detail
from agendas.selectors import agenda_list
from core.api import CONFLICT_RESPONSE, CustomerScopedViewSet, Pagination, ServiceWritesMixin
from resourcepools.selectors import insight_list
from scheduling.api.filters import AlertFilter, CallbackDeliveryFilter, QueueFilter, ScheduleFilter
from scheduling.api.serializers import (
    AlertSerializer,
    CallbackDeliverySerializer,
    QueueSerializer,
    ScheduleSerializer,
)
from scheduling.callbacks import callback_redeliver
from scheduling.schedule_services import (
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_trigger,
    schedule_update,
)
from scheduling.selectors import alert_list, callback_delivery_list, queue_stats, schedule_list


@extend_schema(tags=["schedules"])
class ScheduleViewSet(
    ServiceWritesMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """Cron schedules that run a template; the customer's admin writes."""

    selector = staticmethod(schedule_list)
    serializer_class = ScheduleSerializer
    filterset_class = ScheduleFilter
    ordering_fields = ["name", "next_run_at", "created_at"]
    ordering = ["name"]
    create_service = staticmethod(schedule_create)
    update_service = staticmethod(schedule_update)
    delete_service = staticmethod(schedule_delete)
    service_object = "schedule"

    @extend_schema(
        request=None,
        responses={200: ScheduleSerializer, 409: CONFLICT_RESPONSE},
        summary="Pause an active schedule.",
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, pk: str) -> Response:
        schedule = schedule_pause(principal=request.user, schedule=self.get_object())
        return Response(self.get_serializer(schedule).data)

    @extend_schema(
        request=None,
        responses={200: ScheduleSerializer, 409: CONFLICT_RESPONSE},
        summary="Resume a paused schedule from now on.",
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str) -> Response:
        schedule = schedule_resume(principal=request.user, schedule=self.get_object())
        return Response(self.get_serializer(schedule).data)

    @extend_schema(
        request=None,
        responses={201: AgendaSerializer, 409: CONFLICT_RESPONSE},
        summary="Run the schedule's template once now (an active schedule; overlap=skip holds).",
    )
    @action(detail=True, methods=["post"])
    def trigger(self, request: Request, pk: str) -> Response:
        agenda = schedule_trigger(
            principal=request.user, schedule=self.get_object(), cid=request.cid
        )
        return Response(agenda_detail(request, agenda), status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={200: AgendaSerializer(many=True)},
        summary="The agendas this schedule created, newest first.",
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=Pagination)
    def runs(self, request: Request, pk: str) -> Response:
        schedule = self.get_object()
        agendas = agenda_list(principal=request.user).filter(schedule=schedule)
        page = self.paginate_queryset(agendas.order_by("-created_at"))
        context = self.get_serializer_context()
        return self.get_paginated_response(AgendaSerializer(page, many=True, context=context).data)


@extend_schema(tags=["callbacks"])
class CallbackDeliveryViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet
):
    """The callback outbox of your agendas; an admin can queue one for delivery again."""

    selector = staticmethod(callback_delivery_list)
    serializer_class = CallbackDeliverySerializer
    filterset_class = CallbackDeliveryFilter
    ordering_fields = ["id", "created_at", "next_attempt_at"]
    ordering = ["-id"]

    @extend_schema(
        request=None,
        responses={200: CallbackDeliverySerializer, 409: CONFLICT_RESPONSE},
        summary="Deliver a delivered or failed callback again now, with a fresh set of attempts.",
    )
    @action(detail=True, methods=["post"])
    def redeliver(self, request: Request, pk: str) -> Response:
        delivery = callback_redeliver(principal=request.user, delivery=self.get_object())
        return Response(self.get_serializer(delivery).data)


@extend_schema(tags=["queues"])
class QueueViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet):
    """Per visible insight: queue size and depth, ready, executing, oldest ready age."""

    selector = staticmethod(insight_list)
    serializer_class = QueueSerializer
    filterset_class = QueueFilter
    ordering_fields = ["name", "order", "created_at"]
    ordering = ["resource_pool__name", "order", "created_at"]

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        insights = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        stats = queue_stats(principal=request.user, insights=list(insights))
        return self.get_paginated_response(QueueSerializer(stats, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        (stats,) = queue_stats(principal=request.user, insights=[self.get_object()])
        return Response(QueueSerializer(stats).data)


@extend_schema(tags=["alerts"])
class AlertViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet):
    """Alerts raised by your customers' alert rules (docs/design.md §8)."""

    selector = staticmethod(alert_list)
    serializer_class = AlertSerializer
    filterset_class = AlertFilter
    ordering_fields = ["opened_at", "value"]
    ordering = ["-opened_at"]
