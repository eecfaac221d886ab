"""audit-events/: the audit trail, read-only (docs/design.md §10.3 scoping: admins and staff)."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import mixins
from rest_framework.permissions import BasePermission, IsAuthenticated

from audit.api.filters import AuditEventFilter
from audit.api.serializers import AuditEventSerializer
from audit.selectors import audit_event_list, audit_reader
from core.api import CustomerScopedViewSet


class ReadsAuditTrail(BasePermission):
    """Staff, or an admin of at least one customer; viewers and submitters get 403."""

    message = "Reading the audit trail needs the admin role for a customer."

    def has_permission(self, request: Any, view: Any) -> bool:
        return audit_reader(request.user)


@extend_schema(tags=["audit"])
class AuditEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, CustomerScopedViewSet):
    """Who changed what, when, for which customer and from where; newest first.

    Staff read every event; a customer's admin reads that customer's. Nothing changes or
    deletes an event.
    """

    selector = staticmethod(audit_event_list)
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    permission_classes = [IsAuthenticated, ReadsAuditTrail]
    ordering_fields = ["created_at"]
    ordering = ["-created_at"]
