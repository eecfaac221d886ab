"""The session sends its API calls straight to the server over `http.client`
(popclient/direct_http.py) and keeps what httpx gave them: the same bodies, headers and query
on the wire, the same answers and typed errors, connections kept and retired the same way, the
same TLS trust, and httpx itself wherever a proxy or a transport of the caller's is in play."""

import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from popclient.direct_http import direct_connections
from popclient.errors import NotFound, PayloadTooLarge, PopError, TransportError
from popclient.transport import ApiSession


class Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every call with its method; `/api/v1/hang-up/` reads the call and closes the
    connection without an answer; `/api/v1/then-close/` closes it after the answer;
    `/api/v1/missing/` answers 404."""

    protocol_version = "HTTP/1.1"
    seen: list  # set per server

    def _answer(self) -> None:
        if self.path.startswith("/api/v1/too-large/"):
            return self._refuse_unread()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
                "peer": self.client_address[1],
            }
        )
        if self.path.startswith("/api/v1/slow/"):
            time.sleep(0.5)
        if self.path.startswith("/api/v1/odd/"):
            self.send_response(418, "Custom Reason")
            self.send_header("X-Note", "caf\xe9")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/api/v1/then-close/"):
            self.close_connection = True  # after this answer, which does not say so
        if self.path.startswith("/api/v1/hang-up/"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status = 404 if self.path.startswith("/api/v1/missing/") else 200
        answer = json.dumps(
            {"detail": "Not found."} if status == 404 else {"method": self.command}
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("X-POP-CID", "cid-from-server")
        self.end_headers()
        self.wfile.write(answer)

    def _refuse_unread(self) -> None:
        """A 413 on the headers alone, the body left unread, then the connection dropped."""
        self.seen.append({"method": self.command, "path": self.path, "peer": 0})
        answer = b'{"detail": "Request body over 1 MiB."}'
        self.send_response(413)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(answer)
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args) -> None:
        """Silent: the tests read what the server saw (`seen`), not its log."""


@pytest.fixture
def server():
    seen: list = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    running = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    running.daemon_threads = True
    threading.Thread(target=running.serve_forever, daemon=True).start()
    running.seen = seen
    running.url = f"http://127.0.0.1:{running.server_address[1]}"
    yield running
    running.shutdown()
    running.server_close()


@pytest.fixture(autouse=True)
def _no_proxy_in_the_environment(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)


def test_calls_travel_on_one_kept_connection_with_the_body_and_headers_httpx_would_send(server):
    with ApiSession(server.url, "secret-token", cid="cid-1") as session:
        assert session.request("POST", "agendas/", json={"name": "é", "n": [1, 2]}) == {
            "method": "POST"
        }
        session.request("GET", "agendas/", params={"state": ["failed", "aborted"], "x": True})
        session.request("DELETE", "agendas/abc/")
        assert session.last_cid == "cid-from-server"
    post, get, delete = server.seen
    assert post["path"] == "/api/v1/agendas/"
    assert (
        post["body"]
        == json.dumps(
            {"name": "é", "n": [1, 2]}, ensure_ascii=False, separators=(",", ":")
        ).encode()
    )
    assert post["headers"]["content-type"] == "application/json"
    assert post["headers"]["authorization"] == "Token secret-token"
    assert post["headers"]["x-pop-cid"] == "cid-1"
    assert post["headers"]["user-agent"].startswith("popclient/")
    assert post["headers"]["accept"] == "application/json"
    # The query as httpx encodes it: a list repeats its key, True is "true".
    assert get["path"] == "/api/v1/agendas/?" + str(
        httpx.QueryParams({"state": ["failed", "aborted"], "x": True})
    )
    assert get["path"] == "/api/v1/agendas/?state=failed&state=aborted&x=true"
    assert delete["method"] == "DELETE"
    assert len({call["peer"] for call in server.seen}) == 1  # one connection carried all three


def test_a_path_is_percent_encoded_whole(server):
    with ApiSession(server.url, "t") as session:
        with pytest.raises(NotFound):
            session.request("GET", "missing/a b/é/")
        assert session.request("GET", "agendas/a?b/") == {"method": "GET"}
    assert [call["path"] for call in server.seen[-2:]] == [
        "/api/v1/missing/a%20b/%C3%A9/",
        "/api/v1/agendas/a%3Fb/",  # a "?" in an id stays in the path (httpx starts a query)
    ]


def test_an_ipv6_address_without_a_port_gets_its_schemes_port():
    plain = direct_connections("http://[::1]", headers={}, keepalive_seconds=1)
    secure = direct_connections("https://[2001:db8::abcd]/pop", headers={}, keepalive_seconds=1)
    assert (plain.host, plain.port) == ("::1", 80)
    assert (secure.host, secure.port, secure.prefix) == ("2001:db8::abcd", 443, "/pop")


def test_a_server_on_an_ipv6_address_is_reached():
    server_v6 = type("ServerV6", (http.server.ThreadingHTTPServer,), {})
    server_v6.address_family = socket.AF_INET6
    try:
        running = server_v6(("::1", 0), Recorder)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    running.daemon_threads = True
    Recorder.seen = []
    threading.Thread(target=running.serve_forever, daemon=True).start()
    try:
        with ApiSession(f"http://[::1]:{running.server_address[1]}", "t") as session:
            assert session.request("POST", "agendas/", json={}) == {"method": "POST"}
    finally:
        running.shutdown()
        running.server_close()


def test_an_answer_with_latin_1_headers_and_its_own_reason_is_read_as_httpx_reads_it(server):
    with ApiSession(server.url, "t", retries=0) as session:
        with pytest.raises(PopError) as raised:
            session.request("GET", "odd/")
    assert raised.value.status_code == 418
    assert str(raised.value).startswith("Custom Reason (HTTP 418)")


def test_an_answer_sent_before_the_body_was_read_is_the_answer(server):
    # A server that refuses on the headers and drops the connection: the write fails, the
    # 413 is there to read, and it is what the call gets (httpcore reads it too).
    waits: list[float] = []
    with ApiSession(server.url, "t", retries=3, sleep=waits.append) as session:
        with pytest.raises(PayloadTooLarge):
            session.request("POST", "too-large/", json={"x": "y" * 8_000_000}, idempotent=True)
    assert (len(server.seen), waits) == (1, [])


def test_a_call_whose_answer_is_late_times_out_and_a_post_is_not_repeated(server):
    waits: list[float] = []
    with ApiSession(server.url, "t", retries=2, sleep=waits.append) as session:
        with pytest.raises(TransportError, match="ReadTimeout"):
            session.request("POST", "slow/", json={}, timeout=0.2)
    assert (len(server.seen), waits) == (1, [])


def test_a_kept_connection_takes_the_timeout_of_the_call_it_carries(server):
    with ApiSession(server.url, "t", retries=0) as session:
        session.request("GET", "agendas/", timeout=0.2)
        # A long poll after a short call, on the same connection: its own timeout holds.
        assert session.request("POST", "slow/", json={}, timeout=2) == {"method": "POST"}
    assert len({call["peer"] for call in server.seen}) == 1


def test_a_header_httpx_would_refuse_is_refused_before_anything_is_sent(server):
    with ApiSession(server.url, "t", retries=2, cid="bad\r\nX-Injected: 1") as session:
        with pytest.raises(TransportError, match="Invalid header value"):
            session.request("POST", "agendas/", json={})
        with pytest.raises(TransportError, match="Invalid header value"):
            session.request("POST", "agendas/", json={}, cid="caf\xe9")
        assert session.request("POST", "agendas/", json={}, cid="fine") == {"method": "POST"}
        assert len(session._direct._idle) == 1  # nothing left open beside the kept one
    assert [call["headers"]["x-pop-cid"] for call in server.seen] == ["fine"]


def test_a_closed_session_sends_nothing(server):
    session = ApiSession(server.url, "t")
    session.request("GET", "agendas/")
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.request("GET", "agendas/")
    assert len(server.seen) == 1


def test_a_base_url_with_a_path_keeps_its_prefix(server):
    with ApiSession(f"{server.url}/pop/api/v1/", "t") as session:
        session.request("POST", "agendas/bulk/", json={})
    assert server.seen[0]["path"] == "/pop/api/v1/agendas/bulk/"


def test_an_error_answer_is_the_same_typed_error(server):
    with ApiSession(server.url, "t", retries=0) as session:
        with pytest.raises(NotFound) as raised:
            session.request("GET", "missing/x/")
    assert raised.value.status_code == 404
    assert raised.value.cid == "cid-from-server"
    assert str(raised.value) == "Not found. (HTTP 404) [cid cid-from-server]"


def test_a_refused_connection_was_never_sent_so_even_a_post_is_retried():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once it is closed
    waits: list[float] = []
    session = ApiSession(f"http://127.0.0.1:{port}", "t", retries=2, sleep=waits.append)
    with pytest.raises(TransportError, match="ConnectError"):
        session.request("POST", "agendas/", json={})
    assert len(waits) == 2


def test_a_connection_lost_after_the_call_was_written_repeats_only_what_is_idempotent(server):
    waits: list[float] = []
    session = ApiSession(server.url, "t", retries=2, sleep=waits.append)
    with pytest.raises(TransportError, match="POST"):
        session.request("POST", "hang-up/", json={})
    assert (len(server.seen), waits) == (1, [])  # sent once, not repeated
    with pytest.raises(TransportError, match="GET"):
        session.request("GET", "hang-up/")
    assert (len(server.seen), len(waits)) == (4, 2)  # the GET, and two repeats
    session.close()


def test_a_connection_the_server_closed_while_idle_does_not_carry_the_next_call(server):
    with ApiSession(server.url, "t", retries=0) as session:
        # The server answers, then closes the connection without saying so in the answer
        # (as one whose keep-alive ran out does).
        session.request("GET", "then-close/")
        time.sleep(0.1)  # its close arrives
        assert session.request("POST", "agendas/", json={}) == {"method": "POST"}
    first, second = server.seen
    assert first["peer"] != second["peer"]  # a new connection carried the POST


def test_calls_from_many_threads_each_get_their_own_answer(server):
    answers: list = []
    with ApiSession(server.url, "t") as session:

        def call(n: int) -> None:
            for _ in range(10):
                answers.append((n, session.request("PATCH", f"agendas/{n}/", json={"n": n})))

        threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(answers) == 80
    assert all(answer == {"method": "PATCH"} for _, answer in answers)
    bodies = sorted(json.loads(call["body"])["n"] for call in server.seen)
    assert bodies == sorted(n for n in range(8) for _ in range(10))
    assert len({call["peer"] for call in server.seen}) <= 8


def test_a_proxy_in_the_environment_leaves_the_calls_to_httpx(server, monkeypatch):
    # The "proxy" is the recording server: httpx sends it the absolute URL of the call.
    monkeypatch.setenv("HTTP_PROXY", server.url)
    with ApiSession("http://pop.invalid:8000", "t") as session:
        assert session._direct is None
        session.request("GET", "agendas/")
    assert server.seen[0]["path"] == "http://pop.invalid:8000/api/v1/agendas/"


def test_a_transport_of_the_callers_carries_every_call():
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"ok": True})

    with ApiSession("http://pop.test", "t", transport=httpx.MockTransport(answer)) as session:
        assert session.request("GET", "agendas/") == {"ok": True}
    assert seen == ["http://pop.test/api/v1/agendas/"]


@pytest.fixture
def tls_server(tmp_path: Path):
    """The recording server behind TLS, with a self-signed certificate for 127.0.0.1."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    seen: list = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    running = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    running.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    running.socket = context.wrap_socket(running.socket, server_side=True)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{running.server_address[1]}", cert, seen
    running.shutdown()
    running.server_close()


def test_tls_trusts_what_httpx_trusts(tls_server, monkeypatch):
    url, cert, seen = tls_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with ApiSession(url, "t", retries=0) as session:
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            session.request("GET", "agendas/")  # self-signed: not in certifi's bundle
    assert seen == []
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # httpx's way of naming another bundle
    with ApiSession(url, "t", retries=0) as session:
        assert session._direct is not None
        assert session.request("POST", "agendas/", json={}) == {"method": "POST"}
        assert session.request("GET", "agendas/") == {"method": "GET"}
    assert len({call["peer"] for call in seen}) == 1
    assert os.environ["SSL_CERT_FILE"] == str(cert)
    # The certificate names 127.0.0.1, not localhost: the host name is checked too.
    with ApiSession(url.replace("127.0.0.1", "localhost"), "t", retries=0) as session:
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            session.request("GET", "agendas/")


def test_a_connection_past_descriptor_1024_is_still_kept_and_reused(server):
    # `select` refuses descriptors past FD_SETSIZE; a worker with many files open gets its
    # connections there, and must not open a new one for every call.
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1200
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the descriptor limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    held = []
    try:
        while len(held) < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        with ApiSession(server.url, "t", retries=0) as session:
            for _ in range(3):
                assert session.request("POST", "agendas/", json={}) == {"method": "POST"}
            assert session._direct._idle[0][0].sock.fileno() > 1024
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len({call["peer"] for call in server.seen}) == 1


def test_an_absolute_url_a_next_page_is_sent_by_httpx_with_its_query(server):
    with ApiSession(server.url, "t") as session:
        assert session.request("GET", f"{server.url}/api/v1/agendas/?cursor=abc") == {
            "method": "GET"
        }
    # Percent-encoded whole, the "?" would have reached the server as %3F.
    assert server.seen[0]["path"] == "/api/v1/agendas/?cursor=abc"
