"""Typed errors raised by :class:`popclient.client.PopClient` (docs/design.md §10 error codes)."""

from __future__ import annotations

from typing import Any


class PopError(Exception):
    """Base of every error the client raises.

    ``status_code`` is the HTTP status (``None`` for transport failures), ``body`` the
    decoded response body (JSON value or text) and ``cid`` the ``X-POP-CID`` the server
    answered with, which is what to quote when asking an operator about a failure.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        body: Any = None,
        cid: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.body = body
        self.cid = cid

    def __str__(self) -> str:
        text = self.message
        if self.status_code is not None:
            text = f"{text} (HTTP {self.status_code})"
        if self.cid:
            text = f"{text} [cid {self.cid}]"
        return text


class TransportError(PopError):
    """The server could not be reached, or the connection broke (no HTTP status)."""


class ValidationFailed(PopError):
    """400 (or 413): ``errors`` maps field paths to lists of messages."""

    def __init__(self, message: str, *, errors: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.errors = errors


class Unauthorized(PopError):
    """401: missing or bad token."""


class Forbidden(PopError):
    """403: the object is visible but the caller's role is too low."""


class NotFound(PopError):
    """404: missing, or belongs to another customer."""


class Conflict(PopError):
    """409: the action is not allowed in the object's current state (or a stale lease)."""


class PayloadTooLarge(ValidationFailed):
    """413: the request body is over the server's limit."""


class RateLimited(PopError):
    """429: throttled; ``retry_after`` seconds when the server said."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServerError(PopError):
    """5xx from the server."""
