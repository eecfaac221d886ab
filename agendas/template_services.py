"""Agenda templates: create, change, delete, and expand a template with a payload into an agenda
that is submitted (run) or shown (preview) (docs/design.md §5.3, §10.3).

Every public function checks the caller's role first; writes run in one transaction.

Versions: a save that changes the body, the static parameters or the payload schema adds the
template's next immutable version (`template_version_record`); a run expands one version (the
latest unless one is named) and the agenda records its number.
"""

import json
from typing import Any, NamedTuple

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from agenda_language.references import UnresolvedReferences, expand_template
from agendas.models import Agenda, AgendaTemplate, AgendaTemplateVersion
from agendas.payload_schema import payload_errors, payload_schema_errors
from agendas.services import agenda_submit, submitting_customer
from agendas.submit_options import (
    OPTION_NAMES,
    agenda_options_checked,
    template_body_option_errors,
)
from agendas.template_version_models import VERSIONED_FIELDS
from agendas.template_versions import template_version_get, template_version_latest
from agendas.validation import validate_operations
from audit.services import audit_record
from resourcepools.models import Customer, Membership
from resourcepools.selectors import Principal, principal_is_staff, require_role
from resourcepools.services import acting_customer

Role = Membership.Role
# The options a template body may set, each checked as a submission's (agendas/submit_options).
SUBMIT_OPTIONS = OPTION_NAMES


def template_source(
    template: AgendaTemplate, version: int | None = None, *, field: str = "version"
) -> tuple[int | None, dict]:
    """What a run of the template expands: (version number, versioned fields) of version
    `version`, else of the latest (a ValidationError naming `field` for a number it lacks).

    A template without versions (written around the services: fixtures, the demo) runs its
    own fields, and its agendas record no version.
    """
    if version is not None:
        found = template_version_get(template=template, number=version, field=field)
    else:
        found = template_version_latest(template=template)
    if found is None:
        return None, template_versioned_fields(template)
    return found.number, found.fields()


def template_expand(
    *, template: AgendaTemplate, payload: Any, version: int | None = None, field: str = "version"
) -> dict:
    """Validate `payload` against the schema of the template's version (default: the latest)
    and expand its body (docs/design.md §5.3)."""
    return _expanded(template_source(template, version, field=field)[1], payload)


def _expanded(fields: dict, payload: Any) -> dict:
    """Expand a version's body with `payload`, checked against its schema.

    The schema is applied offline, with RE2 and a deadline (agendas/payload_schema.py); one
    stored before those rules that breaks them is a 400 naming `payload_schema`, never used.
    """
    errors = payload_errors(fields["payload_schema"], payload)
    if errors:
        raise ValidationError(errors)
    try:
        body = expand_template(
            fields["agenda"], payload=payload, static_parameters=fields["static_parameters"] or {}
        )
    except UnresolvedReferences as error:
        raise ValidationError({"payload": [str(error)]}) from error
    if not isinstance(body, dict):
        raise ValidationError({"agenda": ["The template does not expand to an agenda object."]})
    return body


def template_run(
    *,
    principal: Principal,
    template: AgendaTemplate,
    payload: Any,
    customer: Customer | None = None,
    schedule: Any = None,
    version: int | None = None,
    cid: str = "",
    **options: Any,
) -> tuple[Agenda, bool]:
    """Expand the template's version `version` (default: its latest) with `payload` and submit
    the result, which records the version's number; options override the body (labels are
    merged: the body's, then the caller's). An unknown version is a 400 naming `version`.

    The body's options are checked as a submission's (400 `agenda.<name>`), the caller's too
    (400 `<name>`). A body's `callback_url` counts only for its owner's runs: a template never
    sends another customer's events anywhere (their own callback, or one they pass, does).
    """
    customer = submitting_customer(principal=principal, customer=customer)
    number, fields = template_source(template, version)
    body = _expanded(fields, payload)
    overrides = {key: value for key, value in options.items() if value is not None}
    from_body = {
        key: body[key]
        for key in SUBMIT_OPTIONS
        if key in body and (key not in overrides or key == "labels")
    }
    if template.customer_id != customer.pk:
        from_body.pop("callback_url", None)
    submit, errors = {}, {}
    for given, prefix in ((from_body, "agenda."), (overrides, "")):
        try:
            checked = agenda_options_checked(given, prefix=prefix)
        except ValidationError as error:
            errors.update(error.message_dict)
            continue
        # Labels add up: the body's, then the caller's (a key in both: the caller's value).
        checked["labels"] = {**submit.get("labels", {}), **checked.get("labels", {})}
        submit.update(checked)
    if errors:
        raise ValidationError(errors)
    return agenda_submit(
        principal=principal,
        customer=customer,
        operations=body.get("operations"),
        template=template,
        template_version=number,
        schedule=schedule,
        cid=cid,
        **submit,
    )


def template_is_usable_by(template: AgendaTemplate, customer: Customer) -> bool:
    """Whether `customer` may run `template`: its own, global, or shared with it (docs/design.md
    §10.3)."""
    return (
        template.customer_id == customer.pk
        or template.is_global
        or template.allowed_customers.filter(pk=customer.pk).exists()
    )


def _template_body_errors(*, agenda: Any, payload_schema: Any) -> dict[str, list[str]]:
    """What a template is refused for at save: its body (operations, and options checked as
    a submission's) and its payload schema (agendas/payload_schema.py), so no run fails on
    them."""
    errors: dict[str, list[str]] = {}
    if not isinstance(agenda, dict):
        errors["agenda"] = ["Expected a JSON object with an `operations` list."]
    else:
        if not isinstance(agenda.get("operations"), list | str) or not agenda.get("operations"):
            errors["agenda.operations"] = ["Expected a non-empty list (or one @<…> reference)."]
        errors.update(template_body_option_errors(agenda))
    schema_errors = payload_schema_errors(payload_schema)
    if schema_errors:
        errors["payload_schema"] = schema_errors
    return errors


def _sharing_errors(
    principal: Principal, fields: dict[str, Any], template: AgendaTemplate | None = None
) -> dict[str, list[str]]:
    """Only staff make a template global; an owner's admin may still un-share one."""
    turns_global = fields.get("is_global") and not (template and template.is_global)
    if turns_global and not principal_is_staff(principal):
        return {"is_global": ["Only staff may share a template with every customer."]}
    return {}


def _author(principal: Principal) -> AbstractBaseUser | None:
    return principal if isinstance(principal, AbstractBaseUser) else None


def _canonical(fields: dict) -> str:
    # JSON text, not Python equality: 1 == True there, and a body changing 1 to true changed.
    return json.dumps(fields, sort_keys=True)


def template_versioned_fields(template: AgendaTemplate) -> dict:
    """The template's own body, static parameters and payload schema, by name."""
    return {name: getattr(template, name) for name in VERSIONED_FIELDS}


@transaction.atomic
def template_version_record(
    *,
    principal: Principal,
    template: AgendaTemplate,
    note: str = "",
    previous: dict | None = None,
) -> AgendaTemplateVersion | None:
    """Add the template's next version, from its saved body, static parameters and payload
    schema, when they differ from its latest version; None when they do not.

    A template without versions (written around the services) is compared with `previous`,
    its fields before this save; with neither (a new template) version 1 is added. Locks the
    template row, so two saves never take the same number. The caller checked the role: the
    template services, or the admin (staff)."""
    AgendaTemplate.objects.select_for_update().filter(pk=template.pk).values("pk").first()
    latest = template_version_latest(template=template)
    fields = template_versioned_fields(template)
    basis = latest.fields() if latest is not None else previous
    if basis is not None and _canonical(basis) == _canonical(fields):
        return None
    return AgendaTemplateVersion.objects.create(
        template=template,
        number=latest.number + 1 if latest else 1,
        author=_author(principal),
        note=note,
        **fields,
    )


def _template_save(template: AgendaTemplate, update_fields: list[str] | None) -> None:
    try:
        with transaction.atomic():
            template.save(update_fields=update_fields)
    except IntegrityError as error:
        raise ValidationError({"name": ["This customer has a template of that name."]}) from error


@transaction.atomic
def agenda_template_create(
    *,
    principal: Principal,
    customer: Customer | None = None,
    allowed_customers: list[Customer] | None = None,
    note: str = "",
    cid: str = "",
    **fields: Any,
) -> AgendaTemplate:
    """Create a template owned by `customer` (default: the one the caller administers), with
    its version 1."""
    customer = acting_customer(principal=principal, customer=customer, role=Role.ADMIN)
    require_role(principal, customer.pk, Role.ADMIN)
    errors = _sharing_errors(principal, fields) | _template_body_errors(
        agenda=fields.get("agenda"), payload_schema=fields.get("payload_schema")
    )
    if errors:
        raise ValidationError(errors)
    template = AgendaTemplate(customer=customer, cid=cid, **fields)
    _template_save(template, None)
    if allowed_customers:
        template.allowed_customers.set(allowed_customers)
    template_version_record(principal=principal, template=template, note=note)
    audit_record(
        action="template.create", target=template, detail={"name": template.name, "version": 1}
    )
    return template


@transaction.atomic
def agenda_template_update(
    *,
    principal: Principal,
    template: AgendaTemplate,
    allowed_customers: list[Customer] | None = None,
    note: str = "",
    **fields: Any,
) -> AgendaTemplate:
    """Change a template (its owner's admin; shared readers may not); a change of its body,
    static parameters or payload schema adds its next version, with `note`. Locks the
    template row."""
    require_role(principal, template.customer_id, Role.ADMIN)
    fields.pop("customer", None)
    template = AgendaTemplate.objects.select_for_update().get(pk=template.pk)
    errors = _sharing_errors(principal, fields, template) | _template_body_errors(
        agenda=fields.get("agenda", template.agenda),
        payload_schema=fields.get("payload_schema", template.payload_schema),
    )
    if errors:
        raise ValidationError(errors)
    previous = template_versioned_fields(template)
    for name, value in fields.items():
        setattr(template, name, value)
    _template_save(template, [*fields, "updated_at"])
    if allowed_customers is not None:
        template.allowed_customers.set(allowed_customers)
    version = template_version_record(
        principal=principal, template=template, note=note, previous=previous
    )
    detail: dict[str, Any] = {"fields": sorted(fields)}
    if version is not None:
        detail["version"] = version.number
    audit_record(action="template.update", target=template, detail=detail)
    return template


@transaction.atomic
def agenda_template_delete(*, principal: Principal, template: AgendaTemplate) -> None:
    """Delete a template (its owner's admin); refused while a schedule uses it."""
    require_role(principal, template.customer_id, Role.ADMIN)
    audit_record(action="template.delete", target=template, detail={"name": template.name})
    template.delete()


class TemplatePreview(NamedTuple):
    """What a run would submit: the expanded body, what a run would refuse (by field path) and
    the version it was expanded from (None for a template without versions)."""

    agenda: dict
    errors: dict[str, list[str]]
    version: int | None


def agenda_template_preview(
    *, principal: Principal, template: AgendaTemplate, payload: Any, version: int | None = None
) -> TemplatePreview:
    """Expand the template's version `version` (default: the latest) with `payload` without
    submitting; the problems are what a run would refuse in the operations and, as
    `agenda.<name>`, in the body's options."""
    number, fields = template_source(template, version)
    body = _expanded(fields, payload)
    problems = validate_operations(body.get("operations"))
    try:
        agenda_options_checked(
            {key: body[key] for key in SUBMIT_OPTIONS if key in body}, prefix="agenda."
        )
    except ValidationError as error:
        problems |= error.message_dict
    return TemplatePreview(body, problems, number)


def agenda_template_run(
    *,
    principal: Principal,
    template: AgendaTemplate,
    payload: Any,
    customer: Customer | None = None,
    version: int | None = None,
    cid: str = "",
    **options: Any,
) -> tuple[Agenda, bool]:
    """Run a template (its version `version`, default the latest) for a customer allowed to
    use it (see template_run)."""
    customer = submitting_customer(principal=principal, customer=customer)
    require_role(principal, customer.pk, Role.SUBMITTER)
    if not template_is_usable_by(template, customer):
        raise ValidationError(
            {"customer": [f"Template {template.name} is not shared with {customer.slug}."]}
        )
    return template_run(
        principal=principal,
        template=template,
        payload=payload,
        customer=customer,
        version=version,
        cid=cid,
        **options,
    )
