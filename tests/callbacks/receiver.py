"""Real HTTP receivers on 127.0.0.1 for callback and alert-webhook tests."""

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it; `at` is time.time() (time-machine aware)."""

    at: float
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict:
        return json.loads(self.body)

    def signature_verifies(self, secret: str) -> bool:
        expected = "sha256=" + hmac.new(secret.encode(), self.body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(self.headers.get("x-pop-signature", ""), expected)


@dataclass
class Receiver:
    """Records every POST and answers with `respond(request)` (default 200)."""

    respond: Callable[[Received], int] = lambda request: 200
    requests: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/hook"

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def events(self) -> list[str]:
        return [request.headers.get("x-pop-event", "") for request in self.requests]


def answering(*statuses: int, then: int = 200) -> Callable[[Received], int]:
    """Answer the given statuses in order, then `then` for every later request."""
    script = list(statuses)
    return lambda request: script.pop(0) if script else then


def _start(receiver: Receiver) -> Receiver:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = Received(
                at=time.time(),
                path=self.path,
                headers={key.lower(): value for key, value in self.headers.items()},
                body=body,
            )
            receiver.requests.append(request)
            status = receiver.respond(request)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.server = server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver


@pytest.fixture
def http_receiver() -> Iterator[Callable[..., Receiver]]:
    """Start receivers: `http_receiver()` answers 200, `http_receiver(respond=...)` scripts it."""
    started: list[Receiver] = []

    def start(respond: Callable[[Received], int] | None = None) -> Receiver:
        receiver = _start(Receiver(respond=respond or (lambda request: 200)))
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.server.shutdown()
        receiver.server.server_close()


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A URL whose host accepts connections (the kernel's backlog) but never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    listener.close()
