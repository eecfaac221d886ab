"""The fire endpoint's credential: an HMAC-SHA256 of `b"<timestamp>." + body` keyed with the
trigger's secret (docs/design.md §5.4; popclient/triggers.py is the sending half).

Checked before the body is parsed, compared in constant time; a timestamp more than
REPLAY_WINDOW_SECONDS from the server's clock is refused, so a captured request cannot be
sent again later. Inside the window the firing keeps `signature_digest` of each accepted
request (triggers/firing.py), so the same signed request runs at most once, whatever its
unsigned `Idempotency-Key` says.
"""

import hashlib
import hmac
import time

REPLAY_WINDOW_SECONDS = 300
TIMESTAMP_HEADER = "X-POP-Timestamp"
SIGNATURE_HEADER = "X-POP-Signature"
PREFIX = "sha256="
MAX_TIMESTAMP_DIGITS = 12


class BadSignature(Exception):
    """Missing, malformed, stale or wrong: the message says which (no secret in it)."""


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>` of `timestamp.body` keyed with `secret`."""
    message = timestamp.encode() + b"." + body
    return PREFIX + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signature_digest(given: str) -> str:
    """What a firing keeps of a checked signature: sha256 hex of the header's text."""
    return hashlib.sha256(given.encode("utf-8", "replace")).hexdigest()


def signature_check(
    *, secret: str, timestamp: str | None, given: str | None, body: bytes, now: float | None = None
) -> None:
    """Raise BadSignature unless `given` signs `body` at `timestamp`, inside the window."""
    if not timestamp or not given:
        raise BadSignature(f"Sign the request: {TIMESTAMP_HEADER} and {SIGNATURE_HEADER}.")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > MAX_TIMESTAMP_DIGITS:
        raise BadSignature(f"{TIMESTAMP_HEADER} is whole Unix seconds.")
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > REPLAY_WINDOW_SECONDS:
        raise BadSignature(
            f"{TIMESTAMP_HEADER} is more than {REPLAY_WINDOW_SECONDS} s from the server's clock."
        )
    expected = signature(secret, timestamp, body).encode()
    if not hmac.compare_digest(expected, given.encode("utf-8", "replace")):
        raise BadSignature(f"{SIGNATURE_HEADER} does not match.")
