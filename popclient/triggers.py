"""Firing inbound triggers: the signing half of the trigger protocol (docs/design.md, "Triggers").

``POST /api/v1/triggers/{id}/fire/`` takes no API token: the credential is an HMAC-SHA256 of
``b"<timestamp>." + body`` keyed with the trigger's secret, sent as ``X-POP-Signature:
sha256=<hex>`` beside ``X-POP-Timestamp: <unix seconds>``. The server refuses (401) a
timestamp more than 300 s from its clock, so a captured request cannot be replayed later.

Standalone like the rest of popclient: httpx and the standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx

from popclient import __version__

__all__ = [
    "IDEMPOTENCY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "encode_event",
    "fire",
    "fire_url",
    "sign",
    "sign_event",
    "signed_headers",
]

TIMESTAMP_HEADER = "X-POP-Timestamp"
SIGNATURE_HEADER = "X-POP-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 255


def encode_event(event: dict[str, Any]) -> bytes:
    """The exact bytes to sign and send: compact JSON (the signature covers these bytes)."""
    return json.dumps(event, separators=(",", ":")).encode()


def sign(secret: str, body: bytes, timestamp: str) -> str:
    """``sha256=<hex>``: HMAC-SHA256 keyed with ``secret`` over ``b"<timestamp>." + body``."""
    message = timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(
    secret: str,
    body: bytes,
    *,
    now: float | None = None,
    idempotency_key: str | None = None,
) -> dict[str, str]:
    """The headers that make ``body`` a valid firing of the trigger holding ``secret``."""
    timestamp = str(int(time.time() if now is None else now))
    headers = {
        "Content-Type": "application/json",
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: sign(secret, body, timestamp),
    }
    if idempotency_key:
        if len(idempotency_key) > MAX_IDEMPOTENCY_KEY:
            raise ValueError(f"idempotency_key is longer than {MAX_IDEMPOTENCY_KEY} characters")
        headers[IDEMPOTENCY_HEADER] = idempotency_key
    return headers


def sign_event(secret: str, body: bytes, timestamp: float) -> dict[str, str]:
    """The signing headers for ``body`` at ``timestamp`` (Unix seconds); see signed_headers."""
    return signed_headers(secret, body, now=timestamp)


def fire_url(url: str, trigger_id: str) -> str:
    """The fire endpoint of ``trigger_id`` on the server at ``url`` (with or without /api/v1)."""
    base = url.rstrip("/")
    if not base.endswith("/api/v1"):
        base += "/api/v1"
    return f"{base}/triggers/{trigger_id}/fire/"


def fire(
    url: str,
    trigger_id: str,
    secret: str,
    event: dict[str, Any],
    # Positional too: `pop watch` calls functools.partial(fire, url, id, secret)(event, key).
    idempotency_key: str | None = None,
    *,
    timeout: float = 30.0,
    transport: httpx.BaseTransport | None = None,
) -> tuple[int, dict[str, Any]]:
    """Send one signed event; return the HTTP status and the JSON answer (``{}`` if none).

    No retries here: a caller that retries should pass an ``idempotency_key`` (or rely on the
    trigger's ``event_id_pointer``) so a repeat after a lost answer submits nothing new; each
    retry is signed afresh, so it stays inside the replay window. ``transport``: an httpx
    transport to send through instead of the network (tests).
    """
    body = encode_event(event)
    headers = signed_headers(secret, body, idempotency_key=idempotency_key)
    headers["User-Agent"] = f"popclient/{__version__}"
    with httpx.Client(transport=transport, timeout=timeout) as client:
        response = client.post(fire_url(url, trigger_id), content=body, headers=headers)
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    if not isinstance(answer, dict):
        answer = {"detail": answer}
    return response.status_code, answer
