"""The client does not send a call on a connection the server is closing for idleness.

gunicorn's threaded worker closes a keep-alive connection once it has been idle for its
`keepalive` seconds (2 by default), from its event loop, without reading what arrived on it:
on a busy server a call sent just before that moment is thrown away with the connection
("connection reset"), and a call that is not idempotent cannot be repeated. The server here
does the same over a real socket; the client must open a new connection instead
(popclient/transport.py, KEEPALIVE_EXPIRY_SECONDS).
"""

import select
import socket
import threading
import time

import pytest

from popclient.errors import TransportError
from popclient.transport import KEEPALIVE_EXPIRY_SECONDS, ApiSession

SERVER_KEEPALIVE = 2.0  # gunicorn's default
# How late the server's loop may notice that a connection became readable: a request arriving
# in the last second before the connection expires is closed unread.
LATE_BY = 1.0
IDLE_BETWEEN_CALLS = 1.3  # past the client's expiry; inside the server's last second, with slack


class ClosingIdleServer:
    """HTTP/1.1 with keep-alive; a connection idle for SERVER_KEEPALIVE after its last answer
    is closed unread, as gunicorn's event loop closes it when it comes round late: a request
    that arrived in its last LATE_BY seconds is lost with it."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                if not self._answer_one(conn):
                    return
                if not select.select([conn], [], [], SERVER_KEEPALIVE - LATE_BY)[0]:
                    time.sleep(LATE_BY)
                    return  # closed with whatever arrived unread: the peer sees a reset

    @staticmethod
    def _answer_one(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += conn.recv(65536)
        answer = b'{"ok": true}'
        conn.sendall(
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(answer), answer)
        )
        return True

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server():
    running = ClosingIdleServer()
    yield running
    running.close()


def _two_posts_apart(session: ApiSession) -> list:
    answers = [session.request("POST", "agendas/", json={"n": 1})]
    time.sleep(IDLE_BETWEEN_CALLS)
    answers.append(session.request("POST", "agendas/", json={"n": 2}))
    return answers


def test_a_call_after_an_idle_second_goes_on_a_new_connection_and_is_answered(server):
    assert KEEPALIVE_EXPIRY_SECONDS < IDLE_BETWEEN_CALLS
    assert SERVER_KEEPALIVE - LATE_BY < IDLE_BETWEEN_CALLS < SERVER_KEEPALIVE
    with ApiSession(server.url, "secret-token", retries=0) as session:
        assert session._direct is not None  # the calls' own path (popclient/direct_http.py)
        assert _two_posts_apart(session) == [{"ok": True}, {"ok": True}]
    assert server.connections == 2


def test_a_client_keeping_connections_longer_than_the_server_loses_the_call(server):
    # The hazard the default avoids: reusing the idle connection sends the second call into
    # a socket the server closes unread, and a POST is not repeated.
    with ApiSession(server.url, "secret-token", retries=0, keepalive_seconds=5) as session:
        with pytest.raises(TransportError, match="POST"):
            _two_posts_apart(session)
    assert server.connections == 1
