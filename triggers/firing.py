"""What a signed event does: `trigger_fire` (docs/design.md §5.4).

The signature was checked by the caller (triggers/signing.py); from here on the trigger acts
as the scheduler does for cron runs (`SYSTEM`), always for the trigger's own customer.

- De-duplication: a firing holds its `Idempotency-Key` and its event id under partial unique
  indexes (per trigger; refused firings hold none). A repeat finds the first firing by index;
  a concurrent repeat waits on the index until the first commits, fails, and finds it then.
- Submitted: the firing row and the agenda are written in one transaction.
- Skipped (filter miss) and refused (the event or the run is invalid): the firing is written in
  a small transaction of its own, with its reason, so an operator sees why nothing ran.
- Bounded: each firing stores an excerpt of its event (POP_TRIGGER_EVENT_EXCERPT_BYTES), and a
  trigger keeps its newest POP_TRIGGER_FIRINGS_KEPT firings; older ones go as new ones come.
"""

from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q

from agendas.template_services import agenda_template_run
from audit.services import audit_record
from core.api import unstorable_text_problem
from core.errors import validation_messages
from core.principals import SYSTEM
from triggers.events import EventRefused, event_id, excerpt, filter_miss, payload_mapped
from triggers.models import Trigger, TriggerFiring

Status = TriggerFiring.Status
DUPLICATE = "duplicate"
MAX_REASON = 2000


@dataclass(frozen=True)
class FireOutcome:
    """`status`: submitted, duplicate, skipped or refused; `errors` of a refusal by field or
    JSON pointer (the 400's body)."""

    status: str
    firing: TriggerFiring
    errors: dict[str, list[str]] = field(default_factory=dict)


def trigger_fire(
    *, trigger: Trigger, event: Any, idempotency_key: str = "", cid: str = ""
) -> FireOutcome:
    """Run `trigger` for `event` once per idempotency key and per event id."""
    problem = unstorable_text_problem(event)
    base = {
        "trigger": trigger,
        "customer_id": trigger.customer_id,
        "idempotency_key": idempotency_key or "",
        "event_id": "" if problem else event_id(trigger.event_id_pointer, event),
        "cid": cid[:64],
    }
    first = _first_firing(trigger, base["idempotency_key"], base["event_id"])
    if first is not None:
        return FireOutcome(DUPLICATE, first)
    limit = settings.POP_TRIGGER_EVENT_EXCERPT_BYTES
    kept = excerpt(event, limit, ascii_only=bool(problem))
    base |= {"event": kept.event, "event_truncated": kept.truncated}
    if problem:
        return _refused(base, {"event": [problem]})
    miss = filter_miss(trigger.filter, event)
    if miss is not None:
        return _recorded(base, Status.SKIPPED, miss)
    try:
        payload = payload_mapped(trigger.payload_mapping, event)
    except EventRefused as refusal:
        return _refused(base, refusal.errors)
    try:
        return _submitted(trigger, base, payload)
    except IntegrityError:
        first = _first_firing(trigger, base["idempotency_key"], base["event_id"])
        if first is None:
            raise
        return FireOutcome(DUPLICATE, first)  # a concurrent repeat committed first
    except ValidationError as error:
        return _refused(base, validation_messages(error))
    except PermissionDenied as error:  # not expected for SYSTEM; recorded, never a 500
        return _refused(base, {"non_field_errors": [str(error)]})


def _first_firing(trigger: Trigger, key: str, event_key: str) -> TriggerFiring | None:
    """The firing that holds this key or event id (a unique index lookup each)."""
    wanted = Q()
    if key:
        wanted |= Q(idempotency_key=key)
    if event_key:
        wanted |= Q(event_id=event_key)
    if not wanted:
        return None
    return (
        TriggerFiring.objects.filter(wanted, trigger=trigger)
        .exclude(status=Status.REFUSED)
        .order_by("received_at")
        .first()
    )


def _submitted(trigger: Trigger, base: dict[str, Any], payload: Any) -> FireOutcome:
    with transaction.atomic():
        firing = TriggerFiring(status=Status.SUBMITTED, **base)
        # First, so a concurrent duplicate stops at the unique index before any agenda work.
        firing.save(force_insert=True)
        agenda, _ = agenda_template_run(
            principal=SYSTEM,
            template=trigger.template,
            payload=payload,
            customer=trigger.customer,
            version=trigger.template_version,
            labels=trigger.labels or None,
            cid=base["cid"],
        )
        firing.agenda = agenda
        firing.save(update_fields=["agenda"])
        audit_record(
            action="trigger.fire",
            target=trigger,
            principal=SYSTEM,
            detail={"firing": str(firing.pk), "agenda": str(agenda.pk)},
        )
        _prune(trigger)
    return FireOutcome(Status.SUBMITTED, firing)


def _refused(base: dict[str, Any], errors: dict[str, list[str]]) -> FireOutcome:
    reason = "; ".join(f"{key}: {' '.join(messages)}" for key, messages in errors.items())
    outcome = _recorded(base, Status.REFUSED, reason)
    return FireOutcome(Status.REFUSED, outcome.firing, errors)


def _recorded(base: dict[str, Any], status: str, reason: str) -> FireOutcome:
    """Write a firing that submitted nothing, in a transaction of its own."""
    try:
        with transaction.atomic():
            firing = TriggerFiring(status=status, reason=reason[:MAX_REASON], **base)
            firing.save(force_insert=True)
            _prune(base["trigger"])
    except IntegrityError:  # a skip holds its keys: a concurrent repeat committed first
        first = _first_firing(base["trigger"], base["idempotency_key"], base["event_id"])
        if first is None:
            raise
        return FireOutcome(DUPLICATE, first)
    return FireOutcome(status, firing)


def _prune(trigger: Trigger) -> None:
    """Keep the trigger's newest POP_TRIGGER_FIRINGS_KEPT firings (an index range of the
    trigger's `trigger_firing_newest` index, then one ranged DELETE)."""
    keep = max(1, settings.POP_TRIGGER_FIRINGS_KEPT)
    boundary = list(
        TriggerFiring.objects.filter(trigger=trigger)
        .order_by("-received_at", "-id")
        .values_list("received_at", flat=True)[keep - 1 : keep]
    )
    if boundary:
        TriggerFiring.objects.filter(trigger=trigger, received_at__lt=boundary[0]).delete()
