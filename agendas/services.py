"""Agenda writes: submit, run a template, rerun, abort, pause, resume (DESIGN §4, §5.5).

Every public function checks the caller's role first, runs in one transaction and changes
state only through agendas/states.py.
"""

import uuid
from datetime import datetime
from typing import Any

import jsonschema
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agendas import states
from agendas.models import Agenda, AgendaProgress, AgendaTemplate, OperationProgress
from agendas.references import UnresolvedReferences, expand_template
from agendas.validation import (
    operation_dependencies,
    operations_to_reset,
    validate_agenda_options,
    validate_operations,
)
from resourcepools.mapping import choose_insight
from resourcepools.models import Customer, Membership
from resourcepools.selectors import (
    Principal,
    customer_ids_with_role,
    insight_candidates_for,
    principal_is_staff,
    require_role,
)
from resourcepools.services import acting_customer

Role = Membership.Role
S = AgendaProgress.State
SUBMIT_OPTIONS = (
    "params",
    "link_id",
    "external_id",
    "priority",
    "max_attempts",
    "retry_delay_seconds",
    "callback_url",
    "run_after",
    "do_not_run",
    "default_insight",
    "idempotency_key",
)


def submitting_customer(*, principal: Principal | None, customer: Customer | None) -> Customer:
    """The customer an agenda is submitted for: the given one, or the caller's only one."""
    if customer is not None:
        return customer
    if principal_is_staff(principal):
        raise ValidationError({"customer": ["This field is required for staff submissions."]})
    customer_ids = customer_ids_with_role(principal, Role.SUBMITTER)
    if not customer_ids:
        # Visible customers but no submitter role is "role too low": 403, not a bad field.
        raise PermissionDenied("You have no customer you may submit for.")
    if len(customer_ids) != 1:
        raise ValidationError({"customer": ["You submit for several customers: name one."]})
    return Customer.objects.select_related("resource_pool").get(pk=customer_ids[0])


def agenda_submit(
    *,
    principal: Principal | None,
    operations: Any,
    customer: Customer | None = None,
    params: dict | None = None,
    link_id: str = "",
    external_id: str = "",
    priority: int = 5,
    max_attempts: int = 3,
    retry_delay_seconds: int = 10,
    callback_url: str = "",
    run_after: datetime | None = None,
    do_not_run: bool = False,
    default_insight: str | None = None,
    idempotency_key: str | None = None,
    template: AgendaTemplate | None = None,
    schedule: Any = None,
    cid: str = "",
) -> tuple[Agenda, bool]:
    """Validate and write Agenda + progress + operations + ReadyAgenda in one transaction.

    Returns (agenda, created); `created` is False when `idempotency_key` named an earlier agenda.
    """
    customer = submitting_customer(principal=principal, customer=customer)
    require_role(principal, customer.pk, Role.SUBMITTER)
    if not customer.is_active:
        raise ValidationError({"customer": [f"Customer {customer.slug} is not active."]})
    if idempotency_key:
        earlier = Agenda.objects.filter(customer=customer, idempotency_key=idempotency_key).first()
        if earlier is not None:
            return earlier, False
    params = params or {}
    errors = validate_operations(operations) | validate_agenda_options(
        priority=priority, max_attempts=max_attempts, retry_delay_seconds=retry_delay_seconds
    )
    if errors:
        raise ValidationError(errors)
    candidate = choose_insight(
        insight_candidates_for(customer),
        operations=operations,
        params=params,
        default_insight=default_insight,
    )
    if candidate is None:
        pool = customer.resource_pool.name if customer.resource_pool else "(none)"
        types = sorted({operation["type"] for operation in operations})
        raise ValidationError(
            {"insight": [f"No insight of pool {pool} accepts operation types {types}."]}
        )
    try:
        with transaction.atomic():
            agenda = Agenda.objects.create(
                customer=customer,
                template=template,
                schedule=schedule,
                insight_id=uuid.UUID(candidate.id),
                operations=operations,
                params=params,
                priority=priority,
                max_attempts=max_attempts,
                retry_delay_seconds=retry_delay_seconds,
                callback_url=callback_url,
                external_id=external_id,
                idempotency_key=idempotency_key or "",
                link_id=link_id,
                cid=cid,
            )
            agenda.customer = customer
            states.progress_create(
                agenda=agenda, run_after=run_after, do_not_run=do_not_run, now=timezone.now()
            )
    except IntegrityError:
        if not idempotency_key:
            raise
        # A concurrent submit with the same key won the unique constraint: return its agenda.
        return Agenda.objects.get(customer=customer, idempotency_key=idempotency_key), False
    return agenda, True


def template_expand(*, template: AgendaTemplate, payload: Any) -> dict:
    """Validate `payload` against the template's schema and expand the template body (§4.3)."""
    if template.payload_schema:
        validator = jsonschema.Draft202012Validator(template.payload_schema)
        problems = sorted(validator.iter_errors(payload), key=lambda error: list(error.path))
        if problems:
            errors: dict[str, list[str]] = {}
            for problem in problems:
                path = ".".join(["payload", *(str(part) for part in problem.path)])
                errors.setdefault(path, []).append(problem.message)
            raise ValidationError(errors)
    try:
        body = expand_template(
            template.agenda, payload=payload, static_parameters=template.static_parameters or {}
        )
    except UnresolvedReferences as error:
        raise ValidationError({"payload": [str(error)]}) from error
    if not isinstance(body, dict):
        raise ValidationError({"agenda": ["The template does not expand to an agenda object."]})
    return body


def template_run(
    *,
    principal: Principal | None,
    template: AgendaTemplate,
    payload: Any,
    customer: Customer | None = None,
    schedule: Any = None,
    cid: str = "",
    **options: Any,
) -> tuple[Agenda, bool]:
    """Expand the template with `payload` and submit the result; options override the body."""
    body = template_expand(template=template, payload=payload)
    submit = {key: body[key] for key in SUBMIT_OPTIONS if key in body}
    submit.update({key: value for key, value in options.items() if value is not None})
    return agenda_submit(
        principal=principal,
        customer=customer,
        operations=body.get("operations"),
        template=template,
        schedule=schedule,
        cid=cid,
        **submit,
    )


def _locked_progress(agenda: Agenda) -> AgendaProgress:
    return (
        AgendaProgress.objects.select_for_update()
        .select_related("agenda", "agenda__customer")
        .get(agenda_id=agenda.pk)
    )


@transaction.atomic
def agenda_abort(*, principal: Principal | None, agenda: Agenda) -> AgendaProgress:
    """Abort: waiting agendas at once; an executing one is flagged for its worker (§3)."""
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    if progress.state == S.EXECUTING:
        if not progress.abort_requested:
            progress.abort_requested = True
            progress.save(update_fields=["abort_requested", "updated_at"])
        return progress
    states.transition(progress, S.ABORTED, message="aborted by user", action="abort")
    states.operations_abort_unfinished(progress)
    return progress


@transaction.atomic
def agenda_pause(*, principal: Principal | None, agenda: Agenda) -> AgendaProgress:
    """Pause: waiting agendas at once; an executing one stops after its running operations."""
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    if progress.state == S.EXECUTING:
        if not progress.pause_requested:
            progress.pause_requested = True
            progress.save(update_fields=["pause_requested", "updated_at"])
        return progress
    states.transition(progress, S.PAUSED, message="paused by user", action="pause")
    return progress


@transaction.atomic
def agenda_resume(*, principal: Principal | None, agenda: Agenda) -> AgendaProgress:
    """Resume a paused agenda: back to ready, keeping its finished operations."""
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    if progress.state != S.PAUSED:
        raise states.InvalidTransition(
            f"Agenda {agenda.pk} is {progress.state}; only a paused agenda can be resumed.",
            current_state=progress.state,
        )
    states.transition(progress, S.READY, message="resumed by user")
    return progress


class RerunMode:
    CONTINUE = "continue"
    RESET_ALL = "reset_all"
    OPERATIONS_TO_RESET = "operations_to_reset"
    ALL = (CONTINUE, RESET_ALL, OPERATIONS_TO_RESET)


GENERATED_PARENT = "generatedOperationParent"


def _generated_parent(definition: dict) -> str:
    """The generator of a generated operation, from `params.generatedOperationParent`."""
    params = definition.get("params")
    parent = params.get(GENERATED_PARENT) if isinstance(params, dict) else None
    return parent.lower() if isinstance(parent, str) else ""


def _reset_expansion(
    definitions: list[dict], generated: dict[str, dict], chosen: list[str]
) -> tuple[set[str], set[str]]:
    """POP's reset set: the chosen operations and their dependants, transitively; a generated
    operation whose generator is reset or dropped is dropped (its generator will generate it
    again), and so is a generated one that depends on a dropped one; the other dependants of
    dropped operations are reset. Return (reset, dropped)."""
    dependencies = operation_dependencies(definitions)
    reset = operations_to_reset(definitions, chosen)
    dropped: set[str] = set()
    while True:
        gone = {name.lower() for name in reset | dropped}
        more = {
            name
            for name, definition in generated.items()
            if name not in dropped
            and (_generated_parent(definition) in gone or dependencies.get(name, set()) & dropped)
        }
        if not more:
            return reset - dropped, dropped
        dropped |= more
        reset = operations_to_reset(definitions, reset | dropped)


@transaction.atomic
def agenda_rerun(
    *,
    principal: Principal | None,
    agenda: Agenda,
    mode: str = RerunMode.CONTINUE,
    operations: list[str] | None = None,
    skip_execution: bool = False,
) -> AgendaProgress:
    """Run a finished, paused or held agenda again, resetting the chosen operations (§5.5).

    Generated operations: `continue` keeps them, `reset_all` drops them (their generators
    run again), `operations_to_reset` drops those whose generator is reset (docs/decisions.md).
    """
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    held = progress.state == S.PENDING and progress.do_not_run
    if progress.state not in states.TERMINAL | {S.PAUSED} and not held:
        raise states.InvalidTransition(
            f"Agenda {agenda.pk} is {progress.state}; only a finished, paused or "
            "do-not-run agenda can be rerun.",
            current_state=progress.state,
        )
    generated = {
        row.name: row.generated_definition
        for row in OperationProgress.objects.filter(agenda_progress=progress, is_generated=True)
    }
    definitions = [*agenda.operations, *generated.values()]
    dropped: set[str] = set()
    if mode == RerunMode.RESET_ALL:
        # Every generator runs again and generates afresh: drop what the last run generated.
        reset: set[str] | None = None
        dropped = set(generated)
    elif mode == RerunMode.OPERATIONS_TO_RESET:
        names = {operation["name"] for operation in definitions}
        chosen = list(operations or [])
        unknown = sorted(set(chosen) - names)
        if not chosen:
            raise ValidationError({"operations": ["Name at least one operation to reset."]})
        if unknown:
            raise ValidationError({"operations": [f"Unknown operation names: {unknown}."]})
        reset, dropped = _reset_expansion(definitions, generated, chosen)
    elif mode == RerunMode.CONTINUE:
        reset = set()
    else:
        raise ValidationError({"mode": [f"Must be one of {list(RerunMode.ALL)}."]})
    if dropped:
        OperationProgress.objects.filter(agenda_progress=progress, name__in=dropped).delete()
    if reset is None or reset:
        states.operations_reset(progress, reset)
    progress.percent_complete = 0.0 if reset is None else progress.percent_complete
    progress.do_not_run = skip_execution
    # A rerun grants a fresh set of `max_attempts`; Execution.number keeps counting.
    progress.attempts_completed = 0
    extra = ["percent_complete", "do_not_run", "attempts_completed"]
    if skip_execution:
        if progress.state != S.PENDING:
            states.transition(
                progress, S.PENDING, message="rerun held: skip_execution", extra_fields=extra
            )
        else:
            progress.save(update_fields=extra)
        return progress
    states.transition(progress, S.READY, message=f"rerun ({mode})", extra_fields=extra)
    return progress


# --- appended for the REST API (issue 4): templates, bulk submit, callback redelivery -------


def template_is_usable_by(template: AgendaTemplate, customer: Customer) -> bool:
    """Whether `customer` may run `template`: its own, global, or shared with it (§9)."""
    return (
        template.customer_id == customer.pk
        or template.is_global
        or template.allowed_customers.filter(pk=customer.pk).exists()
    )


def _template_body_errors(*, agenda: Any, payload_schema: Any) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(agenda, dict):
        errors["agenda"] = ["Expected a JSON object with an `operations` list."]
    elif not isinstance(agenda.get("operations"), list | str) or not agenda.get("operations"):
        errors["agenda.operations"] = ["Expected a non-empty list (or one @<…> reference)."]
    if payload_schema is not None:
        try:
            jsonschema.Draft202012Validator.check_schema(payload_schema)
        except jsonschema.SchemaError as error:
            errors["payload_schema"] = [f"Not a valid JSON Schema: {error.message}"]
    return errors


def _template_save(template: AgendaTemplate, update_fields: list[str] | None) -> None:
    try:
        with transaction.atomic():
            template.save(update_fields=update_fields)
    except IntegrityError as error:
        raise ValidationError({"name": ["This customer has a template of that name."]}) from error


@transaction.atomic
def agenda_template_create(
    *,
    principal: Principal | None,
    customer: Customer | None = None,
    allowed_customers: list[Customer] | None = None,
    cid: str = "",
    **fields: Any,
) -> AgendaTemplate:
    """Create a template owned by `customer` (default: the one the caller administers)."""
    customer = acting_customer(principal=principal, customer=customer, role=Role.ADMIN)
    require_role(principal, customer.pk, Role.ADMIN)
    errors = _template_body_errors(
        agenda=fields.get("agenda"), payload_schema=fields.get("payload_schema")
    )
    if errors:
        raise ValidationError(errors)
    template = AgendaTemplate(customer=customer, cid=cid, **fields)
    _template_save(template, None)
    if allowed_customers:
        template.allowed_customers.set(allowed_customers)
    return template


@transaction.atomic
def agenda_template_update(
    *,
    principal: Principal | None,
    template: AgendaTemplate,
    allowed_customers: list[Customer] | None = None,
    **fields: Any,
) -> AgendaTemplate:
    """Change a template (its owner's admin; shared readers may not)."""
    require_role(principal, template.customer_id, Role.ADMIN)
    fields.pop("customer", None)
    template = AgendaTemplate.objects.select_for_update().get(pk=template.pk)
    errors = _template_body_errors(
        agenda=fields.get("agenda", template.agenda),
        payload_schema=fields.get("payload_schema", template.payload_schema),
    )
    if errors:
        raise ValidationError(errors)
    for name, value in fields.items():
        setattr(template, name, value)
    _template_save(template, [*fields, "updated_at"])
    if allowed_customers is not None:
        template.allowed_customers.set(allowed_customers)
    return template


@transaction.atomic
def agenda_template_delete(*, principal: Principal | None, template: AgendaTemplate) -> None:
    """Delete a template (its owner's admin); refused while a schedule uses it."""
    require_role(principal, template.customer_id, Role.ADMIN)
    template.delete()


def agenda_template_preview(
    *, principal: Principal | None, template: AgendaTemplate, payload: Any
) -> tuple[dict, dict[str, list[str]]]:
    """Expand the template with `payload` without submitting; returns (body, problems)."""
    body = template_expand(template=template, payload=payload)
    return body, validate_operations(body.get("operations"))


def agenda_template_run(
    *,
    principal: Principal | None,
    template: AgendaTemplate,
    payload: Any,
    customer: Customer | None = None,
    cid: str = "",
    **options: Any,
) -> tuple[Agenda, bool]:
    """Run a template for a customer allowed to use it (see template_run)."""
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
        cid=cid,
        **options,
    )


@transaction.atomic
def agendas_submit_many(
    *, principal: Principal | None, items: list[dict[str, Any]], cid: str = ""
) -> list[Agenda | dict[str, list[str]]]:
    """Submit each item on its own savepoint; one result per item, the agenda or its errors.

    One bad item never blocks the others (DESIGN §4.1); all good items commit together.
    """
    if not principal_is_staff(principal) and not customer_ids_with_role(principal, Role.SUBMITTER):
        raise PermissionDenied("Submitting needs the submitter role for a customer.")
    results: list[Agenda | dict[str, list[str]]] = []
    for item in items:
        try:
            with transaction.atomic():
                agenda, _ = agenda_submit(principal=principal, cid=cid, **item)
            results.append(agenda)
        except ValidationError as error:
            results.append(
                error.message_dict
                if hasattr(error, "error_dict")
                else {"non_field_errors": error.messages}
            )
        except PermissionDenied as error:
            results.append({"customer": [str(error)]})
    return results
