"""The client's calls sent straight to the server over the standard library's `http.client`,
on keep-alive connections the session keeps.

httpx builds a request through several layers (URL merging, cookies, auth and redirect
flows, then httpcore's pool and the h11 state machine): a POP call of 10 reports cost 1.7 ms
of the client's CPU through `httpx.Client`, against 0.64 ms through `http.client` on the same
connection (bench/RESULTS.md, twenty-second session). A worker pays it on every pull and
report, on the machine that runs the work. So a session sends its calls to its own server
here, and keeps httpx for everything else: a transport of the caller's (the tests' mock and
in-process transports), a proxy named by the environment, an absolute URL (a list's next
page), a base URL with credentials in it.

What httpx gave these calls is kept:
- the same TLS context for `https` (`httpx.create_ssl_context()`: certifi's bundle, or
  SSL_CERT_FILE / SSL_CERT_DIR), the host name checked against the certificate;
- the same body (`json.dumps` as httpx writes it), header values refused unless ASCII without
  line breaks, and the same answer (an `httpx.Response` with the server's reason phrase);
- the same failures, as httpx's exceptions: a connection that could not be opened is a
  `ConnectError`/`ConnectTimeout` (never sent: always safe to repeat); one that broke or
  timed out after the call was written is a `ReadError`/`ReadTimeout`/`RemoteProtocolError`
  (maybe sent: repeated only when idempotent); an answer the server sent before it stopped
  reading the call (a 413 for a body too large) is returned, as httpcore returns it;
- no connection idle longer than `keepalive_seconds` carries a call, nor one the server has
  closed or written to while it sat idle (popclient/transport.py, KEEPALIVE_EXPIRY_SECONDS);
  a closed session sends nothing more.

Not kept (docs/decisions.md, "popclient sends its API calls over `http.client`"): cookies,
compressed answers (`Accept-Encoding: identity`), a query written into the path (the path is
percent-encoded whole), the answer's `.request`, and a cap on connections open at once (one
per thread calling; at most MAX_IDLE_CONNECTIONS are kept idle).
"""

from __future__ import annotations

import http.client
import json
import select
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

MAX_IDLE_CONNECTIONS = 20  # httpx's default max_keepalive_connections
# What a path may carry unquoted (RFC 3986's pchar, "/", and "%" of what is quoted already):
# anything else is percent-encoded, as httpx encodes a space or a non-ASCII letter; unlike
# httpx, a "?" or "#" (in an id) and `[]|^\` are encoded too, so they stay in the path.
PATH_SAFE = "/%:@!$&'()*+,;=-._~"


def direct_connections(
    base_url: str, *, headers: Mapping[str, str], keepalive_seconds: float
) -> DirectConnections | None:
    """Connections for calls to `base_url`, or None where httpx must carry them: a scheme
    other than http/https, credentials in the URL, or a proxy for the scheme where httpx looks
    for one (`urllib.request.getproxies()`: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, and the
    system's settings on macOS and Windows). NO_PROXY is left to httpx: with a proxy named,
    httpx carries every call and applies it."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.username or parts.password:
        return None
    proxies = urllib.request.getproxies()
    if proxies.get(parts.scheme) or proxies.get("all"):
        return None
    return DirectConnections(
        scheme=parts.scheme,
        host=parts.hostname,
        # Named, not left to http.client: it would read an IPv6 address's last ":n" as one.
        port=parts.port or (443 if parts.scheme == "https" else 80),
        prefix=parts.path.rstrip("/"),
        headers=headers,
        keepalive_seconds=keepalive_seconds,
    )


class DirectConnections:
    """A small pool of keep-alive HTTP/1.1 connections to one server (thread-safe: a
    connection carries one call at a time, and goes back to the pool after its answer)."""

    def __init__(
        self,
        *,
        scheme: str,
        host: str,
        port: int,
        prefix: str,
        headers: Mapping[str, str],
        keepalive_seconds: float,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self.prefix = prefix
        self.headers = dict(headers)
        self.keepalive_seconds = keepalive_seconds
        self._ssl_context: ssl.SSLContext | None = (
            httpx.create_ssl_context() if scheme == "https" else None
        )
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Close the idle connections; one carrying a call is closed when its answer is in."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

    def send(
        self,
        method: str,
        target: str,
        *,
        json_body: Any = None,
        query: str = "",
        headers: Mapping[str, str],
        timeout: float,
    ) -> httpx.Response:
        """One call to `target` (a path from the server's root, below the base URL's own
        path); the answer read whole."""
        if self._closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        sent_headers = {**self.headers, **headers}
        for value in sent_headers.values():
            if not value.isascii() or "\r" in value or "\n" in value:
                # httpx refuses these too (a str header value must be ASCII).
                raise httpx.LocalProtocolError(f"Invalid header value {value!r}")
        body = None
        if json_body is not None:
            body = json.dumps(
                json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode("utf-8")
            sent_headers["Content-Type"] = "application/json"
        elif method in ("POST", "PUT", "PATCH"):
            body = b""
        path = quote(self.prefix + target, safe=PATH_SAFE) + (f"?{query}" if query else "")
        connection = self._take(timeout)
        try:
            answer, content = _exchange(connection, method, path, body, sent_headers)
        except BaseException:
            connection.close()
            raise
        if answer.will_close:
            connection.close()
        else:
            self._give_back(connection)
        return httpx.Response(
            answer.status,
            # As http.client read them (latin-1), back to the bytes the server sent.
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.getheaders()],
            content=content,
            extensions={"reason_phrase": answer.reason.encode("latin-1", "replace")},
        )

    def _take(self, timeout: float) -> http.client.HTTPConnection:
        """An idle connection fit to carry a call, or a new one, connected."""
        now = time.monotonic()
        while True:
            with self._lock:
                if not self._idle:
                    break
                connection, idle_since = self._idle.pop()
            if now - idle_since <= self.keepalive_seconds and _quiet(connection):
                connection.sock.settimeout(timeout)
                return connection
            connection.close()
        if self.scheme == "https":
            connection = http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=self._ssl_context
            )
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            connection.connect()
        except TimeoutError as exc:
            connection.close()
            raise httpx.ConnectTimeout(f"{exc}") from exc
        except OSError as exc:
            connection.close()
            raise httpx.ConnectError(f"{exc.__class__.__name__}: {exc}") from exc
        return connection

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE_CONNECTIONS:
                self._idle.append((connection, time.monotonic()))
                return
        connection.close()


def _exchange(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None,
    headers: Mapping[str, str],
) -> tuple[http.client.HTTPResponse, bytes]:
    """Write the call and read its answer whole. A write that fails may be a server that
    answered early and stopped reading (a 413 before the body): its answer is read if it is
    there, and the connection is not kept; otherwise the failure is the write's."""
    try:
        connection.request(method, path, body=body, headers=headers)
    except TimeoutError as exc:
        raise httpx.WriteTimeout(f"{exc}") from exc
    except ValueError as exc:  # what http.client refuses to write
        raise httpx.LocalProtocolError(f"{exc}") from exc
    except OSError as exc:
        try:
            answer = connection.getresponse()
            content = answer.read()
        except (OSError, http.client.HTTPException):
            raise httpx.WriteError(f"{exc.__class__.__name__}: {exc}") from exc
        answer.will_close = True
        return answer, content
    try:
        answer = connection.getresponse()
        return answer, answer.read()
    except TimeoutError as exc:
        raise httpx.ReadTimeout(f"{exc}") from exc
    except http.client.HTTPException as exc:
        raise httpx.RemoteProtocolError(f"{exc.__class__.__name__}: {exc}") from exc
    except OSError as exc:
        raise httpx.ReadError(f"{exc.__class__.__name__}: {exc}") from exc


def _quiet(connection: http.client.HTTPConnection) -> bool:
    """Nothing has arrived on the idle connection: a close from the server (or anything
    else it wrote between calls) makes it readable, and it must not carry the next call.
    `poll` where there is one: `select` refuses a descriptor past FD_SETSIZE (1,024), which a
    worker with many files open reaches."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return not poller.poll(0)
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable
