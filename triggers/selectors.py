"""Reads of triggers and their firings (docs/design.md §5.4, §10.3): scoped by customer for
people; the fire endpoint's one unscoped read is by id, of an enabled trigger."""

import uuid

from django.db.models import QuerySet

from resourcepools.models import Membership
from resourcepools.selectors import Principal, customer_ids_with_role, principal_is_staff
from triggers.models import Trigger, TriggerFiring


def _scoped(rows: QuerySet, principal: Principal) -> QuerySet:
    if principal_is_staff(principal):
        return rows
    return rows.filter(customer_id__in=customer_ids_with_role(principal, Membership.Role.VIEWER))


def trigger_list(*, principal: Principal) -> QuerySet[Trigger]:
    """Triggers of the principal's customers, with customer and template loaded."""
    return _scoped(Trigger.objects.select_related("customer", "template"), principal)


def trigger_firing_list(*, principal: Principal) -> QuerySet[TriggerFiring]:
    """Firings of the principal's customers' triggers, newest first."""
    return _scoped(TriggerFiring.objects.all(), principal).order_by("-received_at", "-id")


def trigger_firings_of(*, principal: Principal, trigger: Trigger) -> QuerySet[TriggerFiring]:
    """One visible trigger's firings, newest first: by the `trigger_firing_newest` index alone
    (the scope is checked on the trigger, so the planner is never tempted by the customer's
    index over every trigger's firings)."""
    if not trigger_list(principal=principal).filter(pk=trigger.pk).exists():
        return TriggerFiring.objects.none()
    return TriggerFiring.objects.filter(trigger=trigger).order_by("-received_at", "-id")


def trigger_to_fire(trigger_id: object) -> Trigger | None:
    """The enabled trigger `trigger_id` names, for its fire endpoint; None for an unknown,
    malformed or disabled id (all a 404: the signature, checked next, is the credential)."""
    try:
        pk = uuid.UUID(str(trigger_id))
    except ValueError:
        return None
    return (
        Trigger.objects.select_related("customer", "template").filter(pk=pk, enabled=True).first()
    )
