"""What a signed event does: `trigger_fire` (docs/design.md §5.4).

The signature was checked by the caller (triggers/signing.py); from here on the trigger acts
as the scheduler does for cron runs (`SYSTEM`), always for the trigger's own customer.

- Replay: every firing holds the sha256 of its request's signature under a unique index per
  trigger (kept while the signature could still be valid, see `_prune`). The same signed
  request again is `replayed` (401) if its key or event id differ from its first firing's
  (the key is not signed, so changing it must not run the event again); with the same ones
  it is a duplicate of a submitted first firing, and tried again after a refused or skipped
  one (as a re-signed request would be).
- De-duplication: a submitted firing holds its `Idempotency-Key` and its event id under
  partial unique indexes (per trigger; refused and skipped firings hold none). A repeat finds
  the first firing by index; a concurrent repeat waits on the index until the first commits,
  fails, and finds it then.
- Submitted: the firing row and the agenda are written in one transaction.
- Skipped (filter miss) and refused (the event or the run is invalid): the firing is written in
  a small transaction of its own, with its reason, so an operator sees why nothing ran.
- Bounded: each firing stores an excerpt of its event (POP_TRIGGER_EVENT_EXCERPT_BYTES), and a
  trigger keeps its newest POP_TRIGGER_FIRINGS_KEPT firings; older ones go as new ones come.
"""

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from agendas.template_services import agenda_template_run, template_is_usable_by
from audit.services import audit_record
from core.api import unstorable_text_problem
from core.errors import validation_messages
from core.principals import SYSTEM
from triggers.events import (
    EventRefused,
    body_excerpt,
    event_id,
    excerpt,
    filter_miss,
    nonfinite_problem,
    payload_mapped,
)
from triggers.models import Trigger, TriggerFiring
from triggers.signing import REPLAY_WINDOW_SECONDS

Status = TriggerFiring.Status
DUPLICATE = "duplicate"
REPLAYED = "replayed"
MAX_REASON = 2000


@dataclass(frozen=True)
class FireOutcome:
    """`status`: submitted, duplicate, replayed, skipped or refused; `errors` of a refusal by
    field or JSON pointer (the 400's body)."""

    status: str
    firing: TriggerFiring
    errors: dict[str, list[str]] = field(default_factory=dict)


def trigger_fire(
    *,
    trigger: Trigger,
    event: Any,
    idempotency_key: str = "",
    cid: str = "",
    signature_digest: str = "",
) -> FireOutcome:
    """Run `trigger` for `event` once per signed request, idempotency key and event id."""
    problem = unstorable_text_problem(event) or nonfinite_problem(event)
    base = {
        "trigger": trigger,
        "customer_id": trigger.customer_id,
        "idempotency_key": idempotency_key or "",
        "event_id": "" if problem else event_id(trigger.event_id_pointer, event),
        "cid": cid[:64],
        "signature_digest": signature_digest,
    }
    seen = _seen(base)
    if seen is not None:
        return seen
    limit = settings.POP_TRIGGER_EVENT_EXCERPT_BYTES
    kept = excerpt(event, limit, ascii_only=bool(problem))
    base |= {"event": kept.event, "event_truncated": kept.truncated}
    if problem:
        return _refused(base, {"event": [problem]})
    if not template_is_usable_by(trigger.template, trigger.customer):
        # Unshared since the trigger was saved: the trigger stays editable, firing it is not.
        message = f"Template {trigger.template.name} is no longer shared with this customer."
        return _refused(base, {"template": [message]})
    miss = filter_miss(trigger.filter, event)
    if miss is not None:
        return _recorded(base, Status.SKIPPED, miss)
    try:
        payload = payload_mapped(trigger.payload_mapping, event, limit=settings.POP_MAX_BODY_BYTES)
    except EventRefused as refusal:
        return _refused(base, refusal.errors)
    try:
        return _submitted(trigger, base, payload)
    except IntegrityError:
        seen = _seen(base)
        if seen is None:
            raise
        return seen  # a concurrent repeat committed first
    except ValidationError as error:
        return _refused(base, validation_messages(error))
    except PermissionDenied as error:  # not expected for SYSTEM; recorded, never a 500
        return _refused(base, {"non_field_errors": [str(error)]})


def trigger_fire_refused(
    *,
    trigger: Trigger,
    body: bytes,
    errors: dict[str, list[str]],
    idempotency_key: str = "",
    cid: str = "",
    signature_digest: str = "",
) -> FireOutcome:
    """Record a signed request refused before it became an event (a body that is not a JSON
    object, too deep, or a bad Idempotency-Key), with an excerpt of its raw body."""
    kept = body_excerpt(body, settings.POP_TRIGGER_EVENT_EXCERPT_BYTES)
    base = {
        "trigger": trigger,
        "customer_id": trigger.customer_id,
        "idempotency_key": idempotency_key,
        "event_id": "",
        "cid": cid[:64],
        "signature_digest": signature_digest,
        "event": kept.event,
        "event_truncated": kept.truncated,
    }
    return _seen(base) or _refused(base, errors)


def _seen(base: dict[str, Any]) -> FireOutcome | None:
    """This request's answer if it was seen before: the same signed request with another key or
    event id than its first firing is a replay, with the same ones a duplicate of a submitted
    first firing (a refused or skipped one is tried again); a new request with the key or
    event id of a submitted firing is a duplicate."""
    trigger, digest = base["trigger"], base["signature_digest"]
    if digest:
        first = TriggerFiring.objects.filter(trigger=trigger, signature_digest=digest).first()
        if first is not None:
            same = (first.idempotency_key, first.event_id) == (
                base["idempotency_key"],
                base["event_id"],
            )
            if not same:
                return FireOutcome(REPLAYED, first)
            if first.status == Status.SUBMITTED:
                return FireOutcome(DUPLICATE, first)
            # Refused or skipped, as sent: it may run once the trigger is fixed (a sender
            # re-signing the same body within the same second makes the same signature).
            # The new firing takes the signature over; its index orders concurrent copies.
            TriggerFiring.objects.filter(pk=first.pk, signature_digest=digest).update(
                signature_digest=""
            )
    first = _first_firing(trigger, base["idempotency_key"], base["event_id"])
    return None if first is None else FireOutcome(DUPLICATE, first)


def _first_firing(trigger: Trigger, key: str, event_key: str) -> TriggerFiring | None:
    """The submitted firing that holds this key or event id (a unique index lookup each)."""
    wanted = Q()
    if key:
        wanted |= Q(idempotency_key=key)
    if event_key:
        wanted |= Q(event_id=event_key)
    if not wanted:
        return None
    return (
        TriggerFiring.objects.filter(wanted, trigger=trigger)
        .exclude(status__in=[Status.REFUSED, Status.SKIPPED])
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
    except IntegrityError:  # its signature: a concurrent copy of this request committed first
        seen = _seen(base)
        if seen is None:
            raise
        return seen
    return FireOutcome(status, firing)


def _prune(trigger: Trigger) -> None:
    """Keep the trigger's newest POP_TRIGGER_FIRINGS_KEPT firings (an index range of the
    trigger's `trigger_firing_newest` index, then one ranged DELETE), and every firing whose
    signature could still be valid: its timestamp may lie up to REPLAY_WINDOW_SECONDS ahead
    of its receipt and is accepted for REPLAY_WINDOW_SECONDS after, so a firing younger than
    twice the window keeps its signature_digest, and the same request cannot run again."""
    keep = max(1, settings.POP_TRIGGER_FIRINGS_KEPT)
    boundary = list(
        TriggerFiring.objects.filter(trigger=trigger)
        .order_by("-received_at", "-id")
        .values_list("received_at", flat=True)[keep - 1 : keep]
    )
    if boundary:
        signatures_valid_since = timezone.now() - timedelta(seconds=2 * REPLAY_WINDOW_SECONDS)
        older = min(boundary[0], signatures_valid_since)
        TriggerFiring.objects.filter(trigger=trigger, received_at__lt=older).delete()
