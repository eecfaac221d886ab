"""Write audit events: `audit_record` for one action, `audit_record_bulk` for a batch.

Call them inside the transaction of the change they record, after the change, so that both
commit or neither does. The actor is the principal given, else the user of the current
request (audit.context), else "system"; the token name, address and correlation id come
from the current request. This module imports no domain app: every domain service imports it.
"""

import math
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from django.db.models import Model
from django.http import HttpRequest

from audit.context import acting_principal, current_request
from audit.models import AuditEvent
from core.client_ip import client_ip

SYSTEM_ACTOR = "system"
ANONYMOUS_ACTOR = "anonymous"
#: Bounds of `detail`: items per list or object, characters per string, nesting depth.
DETAIL_MAX_ITEMS = 100
DETAIL_MAX_TEXT = 200
DETAIL_MAX_DEPTH = 4
CUSTOMER_LABEL = "resourcepools.customer"

Target = Model | tuple[str, object] | None


def _text(value: object, limit: int = DETAIL_MAX_TEXT) -> str:
    """`value` as storable text: no NUL, no lone surrogates (jsonb refuses both), bounded."""
    text = str(value)[:limit].replace("\x00", "")
    return text.encode("utf-8", "replace").decode("utf-8")


def bounded_detail(value: Any, depth: int = 0) -> Any:
    """A JSON-ready copy of `value` with at most DETAIL_MAX_ITEMS items per list or object,
    DETAIL_MAX_TEXT characters per string and DETAIL_MAX_DEPTH levels; models become ids."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _text(value)  # jsonb has no NaN, no inf
    if isinstance(value, Model):
        return _text(value.pk)
    if depth >= DETAIL_MAX_DEPTH:
        return _text(value)
    if isinstance(value, Mapping):
        items = list(value.items())[:DETAIL_MAX_ITEMS]
        return {_text(key): bounded_detail(item, depth + 1) for key, item in items}
    if isinstance(value, set | frozenset):
        value = sorted(value, key=str)
    if isinstance(value, list | tuple):
        return [bounded_detail(item, depth + 1) for item in value[:DETAIL_MAX_ITEMS]]
    return _text(value)


def _target(target: Target) -> tuple[str, str]:
    if target is None:
        return "", ""
    if isinstance(target, Model):
        pk = target.pk
        return target._meta.label_lower, "" if pk is None else _text(pk, 64)
    kind, pk = target
    return _text(kind, 100), "" if pk is None else _text(pk, 64)


def customer_id_of(customer: Any = None, target: Target = None) -> Any:
    """The id of the customer given (a Customer or its id), else of the target: the target
    itself when it is a customer, or its `customer_id`."""
    if customer is not None:
        return getattr(customer, "pk", customer)
    if isinstance(target, Model):
        if target._meta.label_lower == CUSTOMER_LABEL:
            return target.pk
        return getattr(target, "customer_id", None)
    return None


def _token_name(request: HttpRequest | None, user: Any) -> str:
    """The name of the API token that authenticated `user` on this request; "" for a session.

    The token authentication sets `pop_token_name` on the Django request; a token scheme
    that does not falls back to the token's `name`, else "token".
    """
    if request is None or user is None:
        return ""
    if getattr(getattr(request, "user", None), "pk", None) != user.pk:
        return ""
    name = getattr(request, "pop_token_name", None)
    if name is None:
        auth = getattr(request, "auth", None)
        if auth is None:
            return ""
        name = getattr(auth, "name", "") or "token"
    return _text(name, 100)


def _actor(principal: Any, request: HttpRequest | None) -> tuple[Any, str]:
    """(user or None, username snapshot) of whoever acts."""
    if principal is None and request is not None:
        principal = getattr(request, "user", None)
    if principal is None:
        principal = acting_principal()
    if principal is not None and getattr(principal, "is_authenticated", False):
        return principal, _text(principal.get_username(), 150)
    return None, SYSTEM_ACTOR if request is None else ANONYMOUS_ACTOR


def _event(
    *, action: str, customer_id: Any, target: Target, detail: Any, principal: Any
) -> AuditEvent:
    request = current_request()
    user, username = _actor(principal, request)
    target_type, target_id = _target(target)
    return AuditEvent(
        customer_id=customer_id,
        user_id=None if user is None else user.pk,
        username=username,
        token_name=_token_name(request, user),
        action=_text(action, 64),
        target_type=target_type,
        target_id=target_id,
        detail=bounded_detail(detail or {}),
        address=client_ip(request) if request is not None else None,
        cid=_text(getattr(request, "cid", ""), 64) if request is not None else "",
    )


def audit_record(
    *,
    action: str,
    customer: Any = None,
    target: Target = None,
    detail: Mapping[str, Any] | None = None,
    principal: Any = None,
) -> AuditEvent:
    """Record one action (`"agenda.abort"`) on `target` (a model row, or (type, id)).

    `customer` (a Customer or its id) defaults to the target's customer; `principal` to the
    current request's user. `detail` is cut to DETAIL_MAX_ITEMS items per list: keep it to
    counts, ids and field names, never secrets.
    """
    event = _event(
        action=action,
        customer_id=customer_id_of(customer, target),
        target=target,
        detail=detail,
        principal=principal,
    )
    event.save(force_insert=True)
    return event


def audit_record_bulk(
    *,
    action: str,
    targets: Iterable[Model],
    detail: Mapping[str, Any] | None = None,
    principal: Any = None,
) -> list[AuditEvent]:
    """Record one batch action: one event per customer of the targets (none for no target),
    whose detail holds `count` and the first DETAIL_MAX_ITEMS `ids`."""
    by_customer: dict[Any, list[Model]] = {}
    for target in targets:
        by_customer.setdefault(customer_id_of(None, target), []).append(target)
    events = [
        _event(
            action=action,
            customer_id=customer_id,
            target=(rows[0]._meta.label_lower, None),
            detail={
                "count": len(rows),
                "ids": [row.pk for row in rows[:DETAIL_MAX_ITEMS]],
                **(detail or {}),
            },
            principal=principal,
        )
        for customer_id, rows in by_customer.items()
    ]
    return AuditEvent.objects.bulk_create(events)


def audit_events_expire(*, retention_days: int | None, now: Any, batch_size: int = 1000) -> int:
    """Delete the events older than `retention_days` (None: keep every event, the default),
    oldest first, `batch_size` per statement over the time index; return how many went. The
    one way an event leaves the trail: `AuditEvent.delete()` still refuses a single row."""
    if retention_days is None:
        return 0
    cutoff = now - timedelta(days=retention_days)
    removed = 0
    while True:
        ids = list(
            AuditEvent.objects.filter(created_at__lt=cutoff)
            .order_by("created_at")
            .values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return removed
        removed += AuditEvent.objects.filter(pk__in=ids).delete()[0]
