"""HTTP transport of the POP client: sending one API call, with retries, backoff, 429
handling, and mapping of error answers to typed errors."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self

import httpx

from popclient import __version__
from popclient.direct_http import direct_connections
from popclient.errors import (
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    PopError,
    RateLimited,
    ServerError,
    TransportError,
    Unauthorized,
    ValidationFailed,
)

# The name the client logged under before the transport had a module of its own.
log = logging.getLogger("popclient.client")

API_PREFIX = "/api/v1"
CID_HEADER = "X-POP-CID"
LEASE_HEADER = "X-POP-Lease"
IDEMPOTENCY_HEADER = "Idempotency-Key"

# How long a connection may sit idle and still carry the next call. Below the server's own
# keep-alive (gunicorn's default is 2 s), so the client never sends on a connection the server
# is about to close: gunicorn closes an expired one without reading a request that already
# arrived on it, and the call fails with "connection reset" (or "disconnected without a
# response") although the server is well — a failure no call may repeat unless idempotent.
KEEPALIVE_EXPIRY_SECONDS = 1.0

# Failures where the request certainly never reached the server: always safe to retry.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})


def _error_message(body: Any, default: str) -> str:
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, str):
            return detail
        parts = []
        for field, messages in body.items():
            if isinstance(messages, list):
                text = "; ".join(str(m) for m in messages)
            else:
                text = str(messages)
            parts.append(f"{field}: {text}")
        if parts:
            return "; ".join(parts)
    if isinstance(body, list) and body:
        return "; ".join(str(item) for item in body)
    if isinstance(body, str) and body.strip():
        return body.strip().splitlines()[0][:200]  # e.g. the title of an HTML error page
    return default


def _field_errors(body: Any) -> dict[str, Any]:
    if isinstance(body, dict):
        if set(body) == {"detail"}:
            return {"non_field_errors": [body["detail"]]}
        return dict(body)
    if isinstance(body, list):
        return {"non_field_errors": list(body)}
    if body:
        return {"non_field_errors": [str(body)]}
    return {}


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def error_from_response(response: httpx.Response) -> PopError:
    """Build the typed error for a non-2xx response."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    status = response.status_code
    cid = response.headers.get(CID_HEADER)
    message = _error_message(body, f"{response.reason_phrase or 'HTTP error'}")
    common: dict[str, Any] = {"status_code": status, "body": body, "cid": cid}
    if status == 400:
        return ValidationFailed(message, errors=_field_errors(body), **common)
    if status == 401:
        return Unauthorized(message, **common)
    if status == 403:
        return Forbidden(message, **common)
    if status == 404:
        return NotFound(message, **common)
    if status == 409:
        return Conflict(message, **common)
    if status == 413:
        return PayloadTooLarge(message, errors=_field_errors(body), **common)
    if status == 429:
        return RateLimited(message, retry_after=_retry_after(response), **common)
    if status >= 500:
        return ServerError(message, **common)
    return PopError(message, **common)


def error_from_batch_item(item: Mapping[str, Any]) -> PopError | None:
    """The error one item of a batch answer stands for (its `status`), None when it is ok."""
    status = item.get("status") or item.get("status_code")
    ok = item.get("ok")
    if ok is None:
        ok = status is None or 200 <= int(status) < 300
    if ok:
        return None
    message = str(item.get("error") or item.get("detail") or item.get("errors") or item)
    if status == 409 or item.get("code") == "conflict":
        return Conflict(message, status_code=409, body=item)
    if status == 404:
        return NotFound(message, status_code=404, body=item)
    if status == 403:
        return Forbidden(message, status_code=403, body=item)
    if status == 400:
        return ValidationFailed(message, errors=item.get("errors") or {}, status_code=400)
    return PopError(message, status_code=int(status) if status else None, body=item)


def without_none(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` without the keys whose value is ``None``."""
    return {key: value for key, value in fields.items() if value is not None}


# A worker that cannot reach the server retries quickly, so it is back within a few seconds
# of the server (or its database) recovering; the jitter keeps a farm's workers from
# retrying in step.
RETRY_CAP_SECONDS = 3.0


def retry_delay(failures: int) -> float:
    """Seconds before retry `failures` (1, 2, …): 0.25 s doubling, at most RETRY_CAP_SECONDS,
    jittered ±20 %."""
    return min(RETRY_CAP_SECONDS, 0.25 * 2 ** min(failures - 1, 8)) * random.uniform(0.8, 1.2)


class ApiSession:
    """One authenticated HTTP session with a POP server, sending API calls with retries.

    ``retries`` is how many times a call is repeated after a failure that is safe to
    repeat: a connection that never reached the server (every call), a 429 (every call),
    and 5xx or a broken connection for idempotent calls. A connection idle for more than
    ``keepalive_seconds`` is not reused: set it below the server's keep-alive timeout.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        cid: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        keepalive_seconds: float = KEEPALIVE_EXPIRY_SECONDS,
    ) -> None:
        base = base_url.rstrip("/")
        if base.endswith(API_PREFIX):
            base = base[: -len(API_PREFIX)]
        self.base_url = base
        self.token = token
        self.cid = cid
        self.last_cid: str | None = None
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep
        default_headers = {"User-Agent": f"popclient/{__version__}", "Accept": "application/json"}
        self._http = httpx.Client(
            base_url=base,
            timeout=timeout,
            transport=transport,
            # httpx's own caps (its default Limits), with the shorter idle expiry.
            limits=httpx.Limits(
                max_connections=100,
                max_keepalive_connections=20,
                keepalive_expiry=keepalive_seconds,
            ),
            headers=default_headers,
        )
        # The API's calls go straight to the server where they can (popclient/direct_http.py);
        # a transport of the caller's carries every call.
        self._direct = (
            direct_connections(base, headers=default_headers, keepalive_seconds=keepalive_seconds)
            if transport is None
            else None
        )

    def close(self) -> None:
        if self._direct is not None:
            self._direct.close()
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _delay(self, attempt: int) -> float:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        return delay * (0.5 + random.random() / 2)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        cid: str | None = None,
        authenticated: bool = True,
    ) -> Any:
        """Send one API call and return the decoded JSON body (``None`` when empty).

        ``path`` is relative to ``/api/v1/``. ``idempotent`` overrides the method's default
        for deciding whether 5xx and broken connections are retried.
        """
        method = method.upper()
        if idempotent is None:
            idempotent = method in _IDEMPOTENT_METHODS
        absolute = path.startswith(("http://", "https://"))
        url = path if absolute else f"{API_PREFIX}/{path.lstrip('/')}"
        send_headers: dict[str, str] = {}
        if authenticated and self.token:
            send_headers["Authorization"] = f"Token {self.token}"
        if cid or self.cid:
            send_headers[CID_HEADER] = cid or self.cid or ""
        if headers:
            send_headers.update(headers)
        query = without_none(params or {})
        direct = None if absolute else self._direct  # an absolute URL is httpx's to send
        encoded_query = str(httpx.QueryParams(query)) if direct and query else ""
        call_timeout = timeout if timeout is not None else self.timeout
        attempt = 0
        while True:
            try:
                if direct is not None:
                    response = direct.send(
                        method,
                        url,
                        json_body=json,
                        query=encoded_query,
                        headers=send_headers,
                        timeout=call_timeout,
                    )
                else:
                    response = self._http.request(
                        method,
                        url,
                        json=json,
                        params=query or None,
                        headers=send_headers,
                        timeout=call_timeout,
                    )
            except httpx.TransportError as exc:
                repeatable = isinstance(exc, _NOT_SENT) or idempotent
                if repeatable and attempt < self.retries:
                    delay = self._delay(attempt)
                    log.debug("%s %s failed (%s); retry in %.2fs", method, url, exc, delay)
                    self._sleep(delay)
                    attempt += 1
                    continue
                raise TransportError(f"{method} {url}: {exc.__class__.__name__}: {exc}") from exc
            self.last_cid = response.headers.get(CID_HEADER, self.last_cid)
            if response.is_success:
                if not response.content:
                    return None
                try:
                    return response.json()
                except ValueError:
                    return response.text
            error = error_from_response(response)
            if method == "DELETE" and attempt > 0 and isinstance(error, NotFound):
                # An earlier attempt may have deleted it before its answer was lost: gone is
                # what was asked for.
                return None
            retry_delay: float | None = None
            if isinstance(error, RateLimited):
                retry_delay = error.retry_after
                if retry_delay is None:
                    retry_delay = self._delay(attempt)
                retry_delay = min(retry_delay, 60.0)
            elif isinstance(error, ServerError) and idempotent:
                retry_delay = self._delay(attempt)
            if retry_delay is not None and attempt < self.retries:
                log.debug(
                    "%s %s -> %s; retry in %.2fs", method, url, response.status_code, retry_delay
                )
                self._sleep(retry_delay)
                attempt += 1
                continue
            raise error

    def _get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def _post(self, path: str, body: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body if body is not None else {}, **kwargs)

    def _patch(self, path: str, fields: Mapping[str, Any]) -> Any:
        # Sent as given: a None value sets the field to null (only what is named changes).
        return self.request("PATCH", path, json=dict(fields))

    def _delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def paginate(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Yield every item of a paginated list (``{count, next, previous, results}``)."""
        page = self._get(path, **params)
        while True:
            if isinstance(page, list):
                yield from page
                return
            yield from page.get("results", [])
            next_url = page.get("next")
            if not next_url:
                return
            page = self.request("GET", next_url)
