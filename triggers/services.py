"""Trigger writes by people: create, change, delete, rotate the secret (docs/design.md §5.4).

Each public function checks the caller's role first (a customer's admin) and runs in one
transaction. What a firing does is triggers/firing.py.
"""

import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from agendas.labels import labels_problems
from agendas.models import AgendaTemplate
from agendas.template_services import template_is_usable_by, template_source
from audit.services import audit_record
from core.api import unstorable_text_problem
from resourcepools.models import Customer, Membership
from resourcepools.selectors import Principal, require_role
from resourcepools.services import acting_customer
from triggers.events import filter_problems, mapping_problems, pointer_problem
from triggers.models import Trigger

Role = Membership.Role
# What a person may set on a trigger (the secret is the server's: create and rotate make it).
FIELDS = frozenset(
    {
        "name",
        "template",
        "template_version",
        "payload_mapping",
        "filter",
        "labels",
        "event_id_pointer",
        "enabled",
        "link_id",
    }
)


def new_secret() -> str:
    """A fresh HMAC key: 32 random bytes, URL-safe text (the protocol's)."""
    return secrets.token_urlsafe(32)


def trigger_validate(trigger: Trigger, *, template_changed: bool = True) -> None:
    """Check a trigger's definition (nothing written): ValidationError by field for a template
    the customer may not use or a version it lacks, a filter, mapping, labels or event id
    pointer that is malformed. Every write of a definition goes through it, the admin's too.

    `template_changed` False (an update keeping template and version) skips the template's
    checks: its owner may have unshared it since, and the customer must still be able to
    disable, rename or refilter its trigger; firing it is refused instead (triggers/firing.py).
    """
    errors: dict[str, list[str]] = {}
    for name in ("name", "payload_mapping", "filter", "labels", "event_id_pointer"):
        problem = unstorable_text_problem(getattr(trigger, name))
        if problem:
            errors[name] = [problem]
    if errors:  # the checks below would echo such text back
        raise ValidationError(errors)
    errors |= filter_problems(trigger.filter)
    errors |= mapping_problems(trigger.payload_mapping)
    errors |= labels_problems(trigger.labels)
    if trigger.event_id_pointer:
        problem = pointer_problem(trigger.event_id_pointer)
        if problem:
            errors["event_id_pointer"] = [problem]
    if template_changed and not template_is_usable_by(trigger.template, trigger.customer):
        errors["template"] = [
            f"Template {trigger.template.name} is not shared with {trigger.customer.slug}."
        ]
    elif template_changed:
        try:
            template_source(trigger.template, trigger.template_version, field="template_version")
        except ValidationError as error:
            errors |= error.message_dict
    if errors:
        raise ValidationError(errors)


def _save(trigger: Trigger, update_fields: list[str] | None) -> None:
    try:
        with transaction.atomic():
            trigger.save(update_fields=update_fields)
    except IntegrityError as error:
        raise ValidationError({"name": ["This customer has a trigger of that name."]}) from error


def _unknown(fields: dict[str, Any]) -> None:
    unknown = sorted(set(fields) - FIELDS)
    if unknown:
        raise ValidationError({name: ["Not a field a trigger has."] for name in unknown})


@transaction.atomic
def trigger_create(
    *,
    principal: Principal,
    template: AgendaTemplate,
    customer: Customer | None = None,
    cid: str = "",
    **fields: Any,
) -> Trigger:
    """Create a trigger of `customer` (default: the one the caller administers) with a new
    secret; the returned row is the only time its secret leaves the server unasked."""
    _unknown(fields)
    customer = acting_customer(principal=principal, customer=customer, role=Role.ADMIN)
    require_role(principal, customer.pk, Role.ADMIN)
    trigger = Trigger(
        customer=customer,
        template=template,
        secret=new_secret(),
        cid=cid,
        created_by=principal if getattr(principal, "pk", None) else None,
        **fields,
    )
    trigger_validate(trigger)
    _save(trigger, None)
    audit_record(action="trigger.create", target=trigger, detail={"name": trigger.name})
    return trigger


@transaction.atomic
def trigger_update(*, principal: Principal, trigger: Trigger, **fields: Any) -> Trigger:
    """Change a trigger's definition (its customer's admin); the customer never changes."""
    fields.pop("customer", None)
    _unknown(fields)
    require_role(principal, trigger.customer_id, Role.ADMIN)
    trigger = (
        Trigger.objects.select_for_update(of=("self",))
        .select_related("customer")
        .get(pk=trigger.pk)
    )
    template_changed = (
        "template" in fields and getattr(fields["template"], "pk", None) != trigger.template_id
    ) or fields.get("template_version", trigger.template_version) != trigger.template_version
    for name, value in fields.items():
        setattr(trigger, name, value)
    trigger_validate(trigger, template_changed=template_changed)
    _save(trigger, [*fields, "updated_at"])
    audit_record(action="trigger.update", target=trigger, detail={"fields": sorted(fields)})
    return trigger


@transaction.atomic
def trigger_delete(*, principal: Principal, trigger: Trigger) -> None:
    """Delete a trigger and its firings (its customer's admin); its agendas stay."""
    require_role(principal, trigger.customer_id, Role.ADMIN)
    audit_record(action="trigger.delete", target=trigger, detail={"name": trigger.name})
    trigger.delete()


@transaction.atomic
def trigger_rotate_secret(*, principal: Principal, trigger: Trigger) -> Trigger:
    """Give the trigger a new secret (its customer's admin): events signed with the old one
    are refused (401) from the commit on. The returned row carries the new secret."""
    require_role(principal, trigger.customer_id, Role.ADMIN)
    trigger = Trigger.objects.select_for_update(of=("self",)).get(pk=trigger.pk)
    trigger.secret = new_secret()
    trigger.save(update_fields=["secret", "updated_at"])
    audit_record(action="trigger.rotate_secret", target=trigger)
    return trigger


@transaction.atomic
def trigger_save_checked(trigger: Trigger, *, template_changed: bool = True) -> Trigger:
    """Save a trigger the admin edited, checked like the API's (a new one gets its secret)."""
    created = trigger._state.adding
    trigger_validate(trigger, template_changed=created or template_changed)
    if created:
        trigger.secret = new_secret()
    _save(trigger, None)
    audit_record(
        action="trigger.create" if created else "trigger.update",
        target=trigger,
        detail={"name": trigger.name},
    )
    return trigger
