"""Agenda writes: submit (one or in bulk), rerun, abort, pause, resume (docs/design.md §5, §7);
templates are agendas/template_services.py.

Every public function checks the caller's role first, runs in one transaction and changes
state only through agendas/states/.
"""

import inspect
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agenda_language.dependencies import operation_dependencies, operations_to_reset
from agendas import states
from agendas.models import Agenda, AgendaProgress, AgendaTemplate, OperationProgress
from agendas.states.waits import AfterAsked, AfterResolver, after_check
from agendas.validation import validate_agenda_options, validate_operations
from audit.services import audit_record, audit_record_bulk
from core.column_inserts import insert_instances
from core.errors import validation_messages
from core.unsaved_instances import unsaved_instance
from resourcepools.mapping import InsightCandidate, accepted_operation_types, choose_insight
from resourcepools.models import Customer, Membership
from resourcepools.selectors import (
    Principal,
    customer_ids_with_role,
    insight_candidates_for,
    principal_is_staff,
    require_role,
)

Role = Membership.Role
S = AgendaProgress.State


def submitting_customer(*, principal: Principal, customer: Customer | None) -> Customer:
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
    principal: Principal,
    operations: Any,
    customer: Customer | None = None,
    params: dict | None = None,
    link_id: str = "",
    external_id: str = "",
    priority: int = 5,
    max_attempts: int = 3,
    retry_delay_seconds: int = 10,
    cost: float | None = None,
    labels: dict[str, str] | None = None,
    callback_url: str = "",
    run_after: datetime | None = None,
    do_not_run: bool = False,
    after: dict | None = None,
    default_insight: str | None = None,
    idempotency_key: str | None = None,
    template: AgendaTemplate | None = None,
    template_version: int | None = None,
    schedule: Any = None,
    cid: str = "",
) -> tuple[Agenda, bool]:
    """Validate and write Agenda + progress + operations + ReadyAgenda in one transaction.

    Returns (agenda, created); `created` is False when `idempotency_key` named an earlier agenda.
    `after` makes it wait for other agendas (`states.after_resolve`, docs/design.md §5.1).
    """
    customer = _checked_customer(principal=principal, customer=customer)
    if idempotency_key:
        earlier = Agenda.objects.filter(customer=customer, idempotency_key=idempotency_key).first()
        if earlier is not None:
            return earlier, False
    params = params or {}
    agenda = _unsaved_agenda(
        customer=customer,
        candidates=lambda: insight_candidates_for(customer),
        operations=operations,
        params=params,
        default_insight=default_insight,
        template=template,
        template_version=template_version,
        schedule=schedule,
        priority=priority,
        max_attempts=max_attempts,
        retry_delay_seconds=retry_delay_seconds,
        cost=cost,
        labels=labels or {},
        callback_url=callback_url,
        external_id=external_id,
        idempotency_key=idempotency_key or "",
        link_id=link_id,
        cid=cid,
    )
    upstreams = states.after_resolve(customer=customer, after=after)
    try:
        with transaction.atomic():
            agenda.save(force_insert=True)
            if upstreams is None:
                states.progress_create(
                    agenda=agenda, run_after=run_after, do_not_run=do_not_run, now=timezone.now()
                )
            else:
                states.progresses_create_after(
                    [(agenda, run_after, do_not_run)], {agenda.pk: upstreams}, now=timezone.now()
                )
            if schedule is None:  # a schedule's run: schedule_trigger's record, or cron's (none)
                audit_record(
                    action="template.run" if template else "agenda.submit",
                    target=agenda,
                    detail={"template": template.pk} if template else None,
                )
    except IntegrityError:
        if not idempotency_key:
            raise
        # A concurrent submit with the same key won the unique constraint: return its agenda.
        return Agenda.objects.get(customer=customer, idempotency_key=idempotency_key), False
    return agenda, True


def _checked_customer(*, principal: Principal, customer: Customer | None) -> Customer:
    """The submission's customer, once the caller may submit for it and it is active."""
    customer = submitting_customer(principal=principal, customer=customer)
    require_role(principal, customer.pk, Role.SUBMITTER)
    if not customer.is_active:
        raise ValidationError({"customer": [f"Customer {customer.slug} is not active."]})
    return customer


def _unsaved_agenda(
    *,
    customer: Customer,
    candidates: Callable[[], list[InsightCandidate]],
    operations: Any,
    params: dict,
    default_insight: str | None,
    **fields: Any,
) -> Agenda:
    """Validate the operations and options, map them to an insight and build the (unsaved)
    Agenda."""
    options = {
        name: fields[name]
        for name in ("priority", "max_attempts", "retry_delay_seconds", "cost", "labels")
        if name in fields
    }
    errors = validate_operations(operations) | validate_agenda_options(**options)
    if errors:
        raise ValidationError(errors)
    offered = candidates()
    candidate = choose_insight(
        offered, operations=operations, params=params, default_insight=default_insight
    )
    if candidate is None:
        raise ValidationError(_no_insight_errors(customer, offered, operations))
    return unsaved_instance(
        Agenda,
        customer=customer,
        insight_id=uuid.UUID(candidate.id),
        operations=operations,
        params=params,
        **fields,
    )


def _no_insight_errors(
    customer: Customer, offered: list[InsightCandidate], operations: list[dict]
) -> dict[str, list[str]]:
    """Why no insight takes the agenda, on each operation's type, with what the pool accepts."""
    pool = customer.resource_pool.name if customer.resource_pool else None
    if not offered:
        where = f"pool {pool}" if pool else "no resource pool"
        return {"insight": [f"Customer {customer.slug} has {where} with an insight it may use."]}
    accepted = accepted_operation_types(offered)
    known = ", ".join(accepted) if accepted else "none by type (only by name or parameter)"
    return {
        f"operations.{index}.type": [
            f"No insight of pool {pool} accepts type {operation['type']!r}; "
            f"types accepted: {known}."
        ]
        for index, operation in enumerate(operations)
    }


def _locked_progress(agenda: Agenda) -> AgendaProgress:
    # Only the progress row: a lock on the joined customer row (select_for_update's default)
    # would hold up every commit that checks a foreign key to that customer — each pull's
    # executions — until this transaction ends, and a batch of actions deadlocked with them.
    return (
        AgendaProgress.objects.select_for_update(of=("self",))
        .select_related("agenda", "agenda__customer")
        .get(agenda_id=agenda.pk)
    )


@transaction.atomic
def agenda_abort(*, principal: Principal, agenda: Agenda) -> AgendaProgress:
    """Abort: waiting agendas at once; an executing one is flagged for its worker (docs/design.md
    §4)."""
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    audit_record(action="agenda.abort", target=agenda, detail={"state": progress.state})
    if progress.state == S.EXECUTING:
        if not progress.abort_requested:
            progress.abort_requested = True
            progress.save(update_fields=["abort_requested", "updated_at"])
        return progress
    states.transition(progress, S.ABORTED, message="aborted by user", action="abort")
    states.operations_abort_unfinished(progress)
    return progress


class PauseMode:
    AFTER_RUNNING = "after_running"  # running operations finish, nothing new starts
    NOW = "now"  # running operations are stopped at once, their progress kept for the resume
    ALL = (AFTER_RUNNING, NOW)


@transaction.atomic
def agenda_pause(
    *, principal: Principal, agenda: Agenda, mode: str = PauseMode.AFTER_RUNNING
) -> AgendaProgress:
    """Pause: waiting agendas at once; an executing one stops after its running operations, or
    with `mode` now, at once (its worker cancels them and reports them waiting again)."""
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    if mode not in PauseMode.ALL:
        raise ValidationError({"mode": [f"Pause mode is one of {', '.join(PauseMode.ALL)}."]})
    progress = _locked_progress(agenda)
    audit_record(
        action="agenda.pause", target=agenda, detail={"state": progress.state, "mode": mode}
    )
    if progress.state == S.EXECUTING:
        now = mode == PauseMode.NOW
        if not progress.pause_requested or (now and not progress.pause_now):
            progress.pause_requested = True
            progress.pause_now = progress.pause_now or now
            progress.save(update_fields=["pause_requested", "pause_now", "updated_at"])
        return progress
    states.transition(progress, S.PAUSED, message="paused by user", action="pause")
    return progress


@transaction.atomic
def agenda_resume(*, principal: Principal, agenda: Agenda) -> AgendaProgress:
    """Resume a paused agenda: back to ready, keeping its finished operations. On an executing
    agenda whose pause was asked but not yet honoured, withdraw the request: its worker reads
    `pause: false` in its next report answer and carries on."""
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    audit_record(action="agenda.resume", target=agenda, detail={"state": progress.state})
    if progress.state == S.EXECUTING and progress.pause_requested:
        progress.pause_requested = False
        progress.pause_now = False
        progress.save(update_fields=["pause_requested", "pause_now", "updated_at"])
        return progress
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
    principal: Principal,
    agenda: Agenda,
    mode: str = RerunMode.CONTINUE,
    operations: list[str] | None = None,
    skip_execution: bool = False,
) -> AgendaProgress:
    """Run a finished, paused or held agenda again, resetting the chosen operations (docs/design.md
    §7).

    Generated operations: `continue` keeps them, `reset_all` drops them (their generators
    run again), `operations_to_reset` drops those whose generator is reset (docs/decisions.md).
    """
    require_role(principal, agenda.customer_id, Role.SUBMITTER)
    progress = _locked_progress(agenda)
    audit_record(
        action="agenda.rerun",
        target=agenda,
        detail={"state": progress.state, "mode": mode, "operations": operations or []},
    )
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
    if reset is None:
        progress.percent_complete = 0.0
    elif mode == RerunMode.OPERATIONS_TO_RESET:
        # What is left of the last run: the operations kept, as a report would roll them up.
        progress.percent_complete = states.percent_rollup(
            OperationProgress.objects.filter(agenda_progress=progress)
        )
    progress.do_not_run = skip_execution
    # A rerun grants a fresh set of `max_attempts`; Execution.number keeps counting.
    progress.attempts_completed = 0
    progress.attempts_started = 0
    extra = ["percent_complete", "do_not_run", "attempts_completed", "attempts_started"]
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


# Keyword arguments of agenda_submit a bulk item may carry, with their defaults.
_ITEM_DEFAULTS: dict[str, Any] = {
    name: parameter.default
    for name, parameter in inspect.signature(agenda_submit).parameters.items()
    if name not in ("principal", "cid")
}
# Bulk writes retried after losing an idempotency key to a concurrent submit.
_KEY_RACE_ATTEMPTS = 3

BulkResult = Agenda | dict[str, list[str]]


@transaction.atomic
def agendas_submit_many(
    *, principal: Principal, items: list[dict[str, Any]], cid: str = ""
) -> list[BulkResult]:
    """Submit many agendas; one result per item, in order: the agenda or its errors.

    Each item is checked exactly as `agenda_submit` checks it and fails on its own
    (docs/design.md §5.2): an item whose idempotency key names an earlier agenda, of this batch or
    before it,
    returns that agenda. Customers, roles and insight candidates are resolved once per call;
    the good items are written together, one INSERT per table.
    """
    if not principal_is_staff(principal) and not customer_ids_with_role(principal, Role.SUBMITTER):
        raise PermissionDenied("Submitting needs the submitter role for a customer.")
    for attempt in range(1, _KEY_RACE_ATTEMPTS + 1):
        results, new, afters = _bulk_plan(principal=principal, items=items, cid=cid)
        keyed = any(agenda.idempotency_key for agenda, _, _ in new)
        try:
            with transaction.atomic(savepoint=keyed):
                now = timezone.now()
                insert_instances(Agenda, [agenda for agenda, _, _ in new], now=now)
                if afters:
                    states.progresses_create_after(new, afters, now=now)
                else:
                    states.progress_create_many(new, now=now)
                audit_record_bulk(action="agenda.submit_many", targets=[row for row, _, _ in new])
        except IntegrityError:
            # A concurrent submit took one of the keys after the plan read them: plan again,
            # and the item returns that agenda (agenda_submit does the same for one item).
            if not keyed or attempt == _KEY_RACE_ATTEMPTS:
                raise
            continue
        return results
    raise AssertionError("unreachable")


def _bulk_item(item: dict[str, Any]) -> dict[str, Any]:
    # The item as agenda_submit's keyword arguments; a wrong key is a TypeError, as in a call.
    unknown = sorted(set(item) - set(_ITEM_DEFAULTS))
    if unknown:
        raise TypeError(f"agendas_submit_many() got unexpected item keys {unknown}")
    fields = {**_ITEM_DEFAULTS, **item}
    if fields["operations"] is inspect.Parameter.empty:
        raise TypeError("agendas_submit_many() item is missing 'operations'")
    return fields


def _bulk_errors(error: ValidationError | PermissionDenied) -> dict[str, list[str]]:
    if isinstance(error, PermissionDenied):
        return {"customer": [str(error)]}
    return validation_messages(error)


def _bulk_plan(
    *, principal: Principal, items: list[dict[str, Any]], cid: str
) -> tuple[
    list[BulkResult], list[tuple[Agenda, datetime | None, bool]], dict[object, states.After]
]:
    """Check every item in Python; return the results, the (agenda, run_after, do_not_run)
    entries to write and the checked `after` of those that wait (by agenda id). Reads: the
    caller's customer (once), the earlier agendas of the items' idempotency keys (once), each
    customer's insight candidates (once per customer) and the items' `after`s (`AfterResolver`:
    their ids once, their link ids once, the upstreams' waiters once; its request-wide bounds
    refuse the whole request)."""
    fields = [_bulk_item(item) for item in items]
    checked: dict[object, Customer | dict[str, list[str]]] = {}
    customers: list[Customer | dict[str, list[str]]] = []
    for item in fields:
        # Items naming no customer share the caller's only one: resolved (or refused) once.
        given = item["customer"]
        key = None if given is None else given.pk
        if key not in checked:
            try:
                checked[key] = _checked_customer(principal=principal, customer=given)
            except (ValidationError, PermissionDenied) as error:
                checked[key] = _bulk_errors(error)
        customers.append(checked[key])

    by_key = _earlier_by_key(
        {
            (customer.pk, item["idempotency_key"])
            for item, customer in zip(fields, customers, strict=True)
            if item["idempotency_key"] and isinstance(customer, Customer)
        }
    )
    asked: list[AfterAsked | None | ValidationError] = []
    for item, customer in zip(fields, customers, strict=True):
        try:
            asked.append(after_check(item["after"]) if isinstance(customer, Customer) else None)
        except ValidationError as error:  # the item's own error, once its operations pass
            asked.append(error)
    resolver = AfterResolver(
        [
            (customer, after)
            for customer, after in zip(customers, asked, strict=True)
            if isinstance(after, AfterAsked)
        ]
    )
    candidates: dict[object, list[InsightCandidate]] = {}

    def candidates_of(customer: Customer) -> Callable[[], list[InsightCandidate]]:
        def read() -> list[InsightCandidate]:
            if customer.pk not in candidates:
                candidates[customer.pk] = insight_candidates_for(customer)
            return candidates[customer.pk]

        return read

    results: list[BulkResult] = []
    new: list[tuple[Agenda, datetime | None, bool]] = []
    afters: dict[object, states.After] = {}
    for item, customer, after_asked in zip(fields, customers, asked, strict=True):
        if not isinstance(customer, Customer):
            results.append(customer)
            continue
        key = item["idempotency_key"]
        if key and (customer.pk, key) in by_key:
            results.append(by_key[customer.pk, key])
            continue
        params = item["params"] or {}
        try:
            agenda = _unsaved_agenda(
                customer=customer,
                candidates=candidates_of(customer),
                operations=item["operations"],
                params=params,
                default_insight=item["default_insight"],
                template=item["template"],
                schedule=item["schedule"],
                priority=item["priority"],
                max_attempts=item["max_attempts"],
                retry_delay_seconds=item["retry_delay_seconds"],
                cost=item["cost"],
                labels=item["labels"] or {},
                callback_url=item["callback_url"],
                external_id=item["external_id"],
                idempotency_key=key or "",
                link_id=item["link_id"],
                cid=cid,
            )
            if isinstance(after_asked, ValidationError):
                raise after_asked
            after = None if after_asked is None else resolver.resolve(customer, after_asked)
        except ValidationError as error:
            results.append(_bulk_errors(error))
            continue
        if after is not None:
            afters[agenda.pk] = after
        if key:
            by_key[customer.pk, key] = agenda
        results.append(agenda)
        new.append((agenda, item["run_after"], item["do_not_run"]))
    AfterResolver.check(afters.values())
    return results, new, afters


def _earlier_by_key(keys: set[tuple[object, str]]) -> dict[tuple[object, str], Agenda]:
    """The agendas already holding these (customer id, idempotency key) pairs, with progress."""
    if not keys:
        return {}
    earlier = Agenda.objects.select_related("progress").filter(
        customer_id__in={customer_id for customer_id, _ in keys},
        idempotency_key__in={key for _, key in keys},
    )
    return {
        (agenda.customer_id, agenda.idempotency_key): agenda
        for agenda in earlier
        if (agenda.customer_id, agenda.idempotency_key) in keys
    }
