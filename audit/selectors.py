"""Who may read which audit events: staff all, a customer's admins that customer's."""

from django.db.models import QuerySet

from audit.models import AuditEvent
from resourcepools.models import Membership
from resourcepools.selectors import Principal, customer_ids_with_role, principal_is_staff


def audit_reader(principal: Principal) -> bool:
    """Whether the principal may read an audit trail at all: staff, or an admin of a customer."""
    return principal_is_staff(principal) or bool(
        customer_ids_with_role(principal, Membership.Role.ADMIN)
    )


def audit_event_list(*, principal: Principal) -> QuerySet[AuditEvent]:
    """Events the principal may read, newest first: all for staff, else those of the
    customers it administers (events of no customer are staff's only)."""
    events = AuditEvent.objects.select_related("customer")
    if principal_is_staff(principal):
        return events
    return events.filter(customer_id__in=customer_ids_with_role(principal, Membership.Role.ADMIN))
