"""Customer callbacks: deliver the `CallbackDelivery` outbox (docs/design.md §8 callbacks).

agendas/states/ writes one outbox row per event in the transaction of the state change;
this module POSTs them. The rules:

- In order per agenda: a row is due only when no earlier row of its agenda is still pending,
  so a receiver never sees `succeeded` before `executing`. A row that ends `failed` no
  longer holds back the ones after it.
- Signed: `X-POP-Signature: sha256=<hex HMAC-SHA256 of the raw body>` keyed with the
  customer's `callback_secret`, plus `X-POP-Event` and `X-POP-Delivery` (the row id, for
  receivers that deduplicate: delivery is at least once).
- Retried: any answer but 2xx, a timeout or a connection error is retried after
  POP_CALLBACK_BACKOFF_SECONDS × 2^(attempt−1) (capped), up to POP_CALLBACK_MAX_ATTEMPTS
  attempts in all; then the row is `failed`.
- Safe: only http(s), without user-info (`user@`) or backslashes; the host must not resolve
  to loopback, private, link-local (cloud metadata), multicast or reserved addresses unless
  POP_CALLBACK_ALLOW_PRIVATE. An IPv6 address that embeds an IPv4 one (IPv4-mapped, NAT64,
  6to4, Teredo) is refused when the IPv4 address would be. The request goes to the address
  that was checked (no second DNS lookup to rebind), redirects are not followed, and the
  answer's body is never read. `callback_url_refusal` applies the same rules at input, to
  the addresses written in the URL (no DNS there: names are checked at every delivery).
- Never blocking: rows are claimed in a short transaction (FOR UPDATE SKIP LOCKED; the claim
  pushes `next_attempt_at` past the delivery time, so no other deliverer picks them up), the
  HTTP calls run outside any transaction, in a small thread pool, and each outcome is
  recorded in another short transaction, conditional on the claim still being ours.
"""

import hashlib
import hmac
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from agendas.states import InvalidTransition
from core.outbound_urls import RefusedURL, resolve_target
from resourcepools.models import Membership
from resourcepools.selectors import Principal, require_role
from scheduling import metrics
from scheduling.models import CallbackDelivery

logger = logging.getLogger("pop.scheduling.callbacks")
Status = CallbackDelivery.Status
USER_AGENT = "POP-callbacks/1"


# --- Settings ------------------------------------------------------------------------------


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def max_attempts() -> int:
    return int(_setting("POP_CALLBACK_MAX_ATTEMPTS", 8))


def backoff(attempt: int) -> timedelta:
    """Wait after failed attempt number `attempt` (1-based): base × 2^(attempt−1), capped."""
    base = _setting("POP_CALLBACK_BACKOFF_SECONDS", 10.0)
    cap = _setting("POP_CALLBACK_BACKOFF_CAP_SECONDS", 3600.0)
    return timedelta(seconds=min(cap, base * 2 ** max(0, attempt - 1)))


# --- Signing and sending (shared with alert webhooks) --------------------------------------


def signature(body: bytes, secret: str) -> str:
    """The `X-POP-Signature` value for a raw body: `sha256=<hex HMAC-SHA256>`."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def encode_body(body: object) -> bytes:
    """The exact bytes sent (and signed) for a JSON body."""
    return json.dumps(body, separators=(",", ":"), sort_keys=True, default=str).encode()


@dataclass(frozen=True)
class SendResult:
    """One HTTP attempt: the status code when there was an answer, else the error."""

    status_code: int | None = None
    error: str = ""
    refused: bool = False

    @property
    def is_success(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def send_signed(
    *,
    url: str,
    body: bytes,
    secret: str,
    event: str,
    extra_headers: dict[str, str] | None = None,
    timeout: float | None = None,
    client: httpx.Client | None = None,
) -> SendResult:
    """POST `body` to `url` signed with `secret`; never raises for network trouble."""
    try:
        address = resolve_target(url)
    except RefusedURL as error:
        return SendResult(error=str(error), refused=True)
    except (OSError, UnicodeError) as error:
        return SendResult(error=f"cannot resolve {urlsplit(url).hostname}: {error}")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-POP-Event": event,
        "X-POP-Signature": signature(body, secret),
        **(extra_headers or {}),
    }
    target = httpx.URL(url)
    extensions = {}
    if address is not None:
        # Connect to the address we checked: a second lookup could be rebound to a private one.
        headers["Host"] = target.netloc.decode("ascii")
        if target.scheme == "https":
            extensions["sni_hostname"] = target.host
        target = target.copy_with(host=address)
    own_client = client is None
    if client is None:
        client = new_client(timeout)
    try:
        with client.stream(
            "POST", target, content=body, headers=headers, extensions=extensions
        ) as response:
            return SendResult(status_code=response.status_code)
    except httpx.TimeoutException as error:
        return SendResult(error=f"timeout: {type(error).__name__}")
    except httpx.HTTPError as error:
        return SendResult(error=f"{type(error).__name__}: {error}"[:1000])
    finally:
        if own_client:
            client.close()


def new_client(timeout: float | None = None) -> httpx.Client:
    """An httpx client for callbacks: no redirects, no proxies from the environment, and no
    kept-alive connections (connections go to checked addresses, never shared by hosts)."""
    seconds = timeout if timeout is not None else _setting("POP_CALLBACK_TIMEOUT", 5.0)
    return httpx.Client(
        timeout=httpx.Timeout(seconds),
        follow_redirects=False,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


# --- The outbox ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claimed:
    pk: int
    attempt: int
    url: str
    event: str
    body: dict
    secret: str
    cid: str


@dataclass(frozen=True)
class DeliveryRun:
    """What one pass did."""

    delivered: int = 0
    retried: int = 0
    failed: int = 0


def callbacks_deliver(*, now: datetime | None = None, batch_size: int | None = None) -> DeliveryRun:
    """Deliver due pending callbacks, oldest first and in order per agenda, until none is due.

    Claims (locks with SKIP LOCKED, then leases) up to `batch_size` rows per round in a short
    transaction, POSTs them outside any transaction, and records each outcome in another short
    transaction. Stops after POP_CALLBACK_RUN_SECONDS so a run never grows without bound.
    """
    fixed_now = now
    batch_size = batch_size or int(_setting("POP_CALLBACK_BATCH_SIZE", 50))
    budget = _setting("POP_CALLBACK_RUN_SECONDS", 30.0)
    started = time.monotonic()
    totals = {"delivered": 0, "retried": 0, "failed": 0}
    # The client is opened for the first row claimed: a run that finds nothing due (most of
    # them, every POP_CALLBACK_INTERVAL) does not build one — its TLS context alone costs
    # more CPU than the claim.
    client: httpx.Client | None = None
    try:
        while time.monotonic() - started < budget:
            claimed = _claim(now=fixed_now or timezone.now(), limit=batch_size)
            if not claimed:
                break
            client = client or new_client()
            results = _send_all(claimed, client=client)
            for row, result in zip(claimed, results, strict=True):
                outcome = _record(row, result, now=fixed_now or timezone.now())
                if outcome:
                    totals[outcome] += 1
                    metrics.CALLBACKS.labels(outcome).inc()
    finally:
        if client is not None:
            client.close()
    return DeliveryRun(**totals)


def _claim(*, now: datetime, limit: int) -> list[_Claimed]:
    """Lease due rows: the first pending row of each agenda whose time has come."""
    earlier_pending = CallbackDelivery.objects.filter(
        agenda_id=OuterRef("agenda_id"), status=Status.PENDING, pk__lt=OuterRef("pk")
    )
    # Long enough for the slowest delivery of this round; a crashed deliverer's rows come
    # back when it ends (the attempt counts).
    lease = timedelta(seconds=2 * _setting("POP_CALLBACK_TIMEOUT", 5.0) + 60)
    with transaction.atomic():
        rows = list(
            CallbackDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(status=Status.PENDING, next_attempt_at__lte=now)
            .filter(~Exists(earlier_pending))
            .order_by("next_attempt_at", "pk")
            .values_list("pk", "url", "event", "body", "cid", "customer__callback_secret")[:limit]
        )
        if not rows:
            return []
        CallbackDelivery.objects.filter(pk__in=[row[0] for row in rows]).update(
            attempts=F("attempts") + 1, next_attempt_at=now + lease, updated_at=now
        )
        attempts = dict(
            CallbackDelivery.objects.filter(pk__in=[row[0] for row in rows]).values_list(
                "pk", "attempts"
            )
        )
    return [
        _Claimed(
            pk=pk,
            attempt=attempts[pk],
            url=url,
            event=event,
            body=body,
            secret=secret or "",
            cid=cid,
        )
        for pk, url, event, body, cid, secret in rows
    ]


def _send_all(claimed: list[_Claimed], *, client: httpx.Client) -> list[SendResult]:
    def send(row: _Claimed) -> SendResult:
        headers = {"X-POP-Delivery": str(row.pk)}
        if row.cid:
            headers["X-POP-CID"] = row.cid
        return send_signed(
            url=row.url,
            body=encode_body(row.body),
            secret=row.secret,
            event=row.event,
            extra_headers=headers,
            client=client,
        )

    workers = max(1, min(len(claimed), int(_setting("POP_CALLBACK_CONCURRENCY", 8))))
    if workers == 1:
        return [send(row) for row in claimed]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pop-callback") as pool:
        return list(pool.map(send, claimed))


def _record(row: _Claimed, result: SendResult, *, now: datetime) -> str | None:
    """Write one attempt's outcome; returns delivered/retried/failed, or None if not ours."""
    mine = CallbackDelivery.objects.filter(pk=row.pk, status=Status.PENDING, attempts=row.attempt)
    if result.is_success:
        fields = {"status": Status.DELIVERED, "delivered_at": now, "last_error": ""}
        outcome = "delivered"
    else:
        error = result.error or f"HTTP {result.status_code}"
        if result.refused or row.attempt >= max_attempts():
            fields = {"status": Status.FAILED, "last_error": error}
            outcome = "failed"
        else:
            fields = {"next_attempt_at": now + backoff(row.attempt), "last_error": error}
            outcome = "retried"
    with transaction.atomic():
        # Conditional on our claim: a rival that re-claimed an expired lease owns the row now,
        # and our outcome is stale.
        updated = mine.update(last_status_code=result.status_code, updated_at=now, **fields)
    if not updated:
        return None
    log = logger.info if outcome == "delivered" else logger.warning
    log(
        "callback %s %s → %s: %s (attempt %d)",
        row.pk,
        row.event,
        row.url,
        outcome if result.is_success else fields["last_error"],
        row.attempt,
    )
    return outcome


@transaction.atomic
def callback_redeliver(*, principal: Principal, delivery: CallbackDelivery) -> CallbackDelivery:
    """Queue a callback again now with a fresh set of attempts (customer admin); locks the row.

    Only a delivered or failed row goes again: a pending one is still on its way (409).
    """
    require_role(principal, delivery.customer_id, Membership.Role.ADMIN)
    delivery = CallbackDelivery.objects.select_for_update().get(pk=delivery.pk)
    if delivery.status == Status.PENDING:
        raise InvalidTransition(
            f"Callback delivery {delivery.pk} is pending: it is still being delivered; "
            "only a delivered or failed one can be delivered again.",
            current_state=delivery.status,
        )
    now = timezone.now()
    delivery.status = Status.PENDING
    delivery.attempts = 0
    delivery.next_attempt_at = now
    delivery.last_error = ""
    delivery.last_status_code = None
    delivery.delivered_at = None
    delivery.save(
        update_fields=[
            "status",
            "attempts",
            "next_attempt_at",
            "last_error",
            "last_status_code",
            "delivered_at",
            "updated_at",
        ]
    )
    return delivery
