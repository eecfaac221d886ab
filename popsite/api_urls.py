"""Routes of the customer-facing REST API (docs/design.md §10); puller routes are scheduling's."""

from django.urls import include, path, re_path
from rest_framework.routers import DefaultRouter

from accounts.api.views import ApiTokenViewSet
from agendas.api.action_views import AgendaActionViewSet
from agendas.api.views import (
    AgendaProgressViewSet,
    AgendaTemplateViewSet,
    AgendaViewSet,
    OperationProgressViewSet,
    ProgressSummaryView,
)
from audit.api.views import AuditEventViewSet
from core.api import api_not_found
from resourcepools.api.views import (
    AuthTokenView,
    CustomerViewSet,
    InsightViewSet,
    MembershipViewSet,
    ResourcePoolViewSet,
)
from scheduling.api.views import (
    AlertViewSet,
    CallbackDeliveryViewSet,
    QueueViewSet,
    ScheduleViewSet,
)
from triggers.api.views import TriggerFireView, TriggerViewSet


class Router(DefaultRouter):
    include_format_suffixes = False


router = Router()
router.register("tokens", ApiTokenViewSet, basename="api-token")
router.register("customers", CustomerViewSet, basename="customer")
router.register(
    r"customers/(?P<customer_pk>[^/.]+)/members", MembershipViewSet, basename="membership"
)
router.register("resource-pools", ResourcePoolViewSet, basename="resource-pool")
router.register("insights", InsightViewSet, basename="insight")
router.register("agenda-templates", AgendaTemplateViewSet, basename="agenda-template")
# Before "agendas": agendas/actions/ is not an agenda id.
router.register("agendas/actions", AgendaActionViewSet, basename="agenda-action")
router.register("agendas", AgendaViewSet, basename="agenda")
router.register("agenda-progress", AgendaProgressViewSet, basename="agenda-progress")
router.register("operation-progress", OperationProgressViewSet, basename="operation-progress")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("triggers", TriggerViewSet, basename="trigger")
router.register("callback-deliveries", CallbackDeliveryViewSet, basename="callback-delivery")
router.register("queues", QueueViewSet, basename="queue")
router.register("alerts", AlertViewSet, basename="alert")
router.register("audit-events", AuditEventViewSet, basename="audit-event")

urlpatterns = [
    path("auth/token/", AuthTokenView.as_view(), name="auth-token"),
    path("progress-summary/", ProgressSummaryView.as_view(), name="progress-summary"),
    # Token-less: the HMAC signature is the credential (docs/design.md §5.4).
    path("triggers/<str:trigger_id>/fire/", TriggerFireView.as_view(), name="trigger-fire"),
    path("", include(router.urls)),
    # Last: any other /api/v1/…/ URL is a JSON 404 (the schema and docs pages, routed after
    # this module in popsite/urls.py, are left alone; no-slash URLs still get APPEND_SLASH).
    re_path(r"^(?!(?:schema|docs|redoc)/)(?P<path>[\s\S]*/)\Z", api_not_found),
]
