"""`pop watch`: an agenda id or a watch folder (`--dir PATH --trigger ID`), never both; the
folder mode run as a real process against a local HTTP server that checks the signature."""

import hashlib
import hmac
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

import httpx
import pytest

from popclient.cli import main
from popclient.client import PopClient

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-of-the-trigger"


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    monkeypatch.setenv("POP_CONFIG", str(tmp_path / "pop.json"))
    for name in ("POP_URL", "POP_TOKEN", "POP_TRIGGER_SECRET"):
        monkeypatch.delenv(name, raising=False)


def pop(*argv, env=None, client_factory=None):
    stdout, stderr = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env or {}):
        code = main(
            ["--url", "http://pop.test", *argv],
            client_factory=client_factory,
            stdout=stdout,
            stderr=stderr,
        )
    return code, stdout.getvalue(), stderr.getvalue()


def test_watch_with_an_agenda_id_follows_the_agenda_until_it_ends():
    agenda = {"id": "a1", "state": "succeeded", "progress": {"percent_complete": 100}}

    def factory(url, token, **options):
        answer = httpx.MockTransport(lambda request: httpx.Response(200, json=agenda))
        return PopClient(url, token, transport=answer, **options)

    code, out, _ = pop("watch", "a1", env={"POP_TOKEN": "tok"}, client_factory=factory)

    assert code == 0
    assert "100.0%  succeeded" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["watch"], "give an agenda id, or --dir PATH --trigger ID"),
        (["watch", "a1", "--dir", "."], "give an agenda id or --dir, not both"),
        (["watch", "--dir", "."], "--dir needs --trigger ID"),
        (["watch", "a1", "--trigger", "t1"], "--trigger: only for a watch folder"),
        (["watch", "a1", "--move-to", "x", "--poll"], "--move-to, --poll: only for a watch"),
        (["watch", "--dir", "/nowhere/at/all", "--trigger", "t1"], "not a directory"),
        (["watch", "--dir", ".", "--trigger", "t1"], "no trigger secret"),
        (["watch", "--dir", ".", "--trigger", "t1", "--secret", "x"], "--secret is not accepted"),
        (["watch", "--dir", ".", "--trigger", "t1", "--settle-seconds", "0"], "more than 0"),
    ],
)
def test_watch_refuses_a_bad_invocation_with_a_usage_error(argv, message):
    code, _, err = pop(*argv)

    assert code == 2
    assert message in err


def test_watch_refuses_move_to_together_with_mark_suffix(capsys):
    code, _, _ = pop(
        "watch", "--dir", ".", "--trigger", "t", "--move-to", "d", "--mark-suffix", "x"
    )

    assert code == 2
    assert "--mark-suffix: not allowed with argument --move-to" in capsys.readouterr().err


def test_watch_refuses_a_broken_state_file(tmp_path):
    (tmp_path / ".pop-watch-state.json").write_text("[")

    code, _, err = pop(
        "watch", "--dir", str(tmp_path), "--trigger", "t1", env={"POP_TRIGGER_SECRET": "x"}
    )

    assert code == 2
    assert "cannot read the state file" in err


class TriggerServer(ThreadingHTTPServer):
    """Answers signed firings 201 (one agenda each), anything else 401, like the server."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _FireHandler)
        self.events = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class _FireHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        timestamp = self.headers.get("X-POP-Timestamp", "")
        expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
        signed = hmac.compare_digest(
            self.headers.get("X-POP-Signature", ""), "sha256=" + expected.hexdigest()
        )
        if self.path != "/api/v1/triggers/t1/fire/" or not signed:
            status, answer = 401, {"detail": "bad signature"}
        else:
            self.server.events.append((json.loads(body), self.headers["Idempotency-Key"]))
            number = len(self.server.events)
            status, answer = 201, {"status": "submitted", "agenda": f"agenda-{number}"}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def trigger_server():
    server = TriggerServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_pop_watch_dir_fires_a_signed_event_per_file_and_stops_cleanly_on_sigterm(
    tmp_path, trigger_server
):
    drop, done = tmp_path / "drop", tmp_path / "done"
    drop.mkdir()
    (tmp_path / "secret").write_text(SECRET + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("POP_")}
    env["POP_CONFIG"] = str(tmp_path / "pop.json")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "popclient", "watch", "--url", trigger_server.url,
            "--dir", str(drop), "--trigger", "t1", "--secret-file", str(tmp_path / "secret"),
            "--pattern", "*.mxf", "--settle-seconds", "0.3", "--move-to", str(done), "--json",
        ],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        (drop / "clip.mxf").write_bytes(b"x" * 42)
        (drop / "notes.txt").write_bytes(b"ignored")
        deadline = time.monotonic() + 10
        while not trigger_server.events and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)

    assert process.returncode == 0, err
    [(event, key)] = trigger_server.events
    assert (event["name"], event["size"], event["path"]) == ("clip.mxf", 42, str(drop / "clip.mxf"))
    assert key.startswith("pop-watch-")
    [line] = out.splitlines()
    assert json.loads(line) == {
        "path": "clip.mxf",
        "outcome": "fired",
        "http_status": 201,
        "status": "submitted",
        "agenda": "agenda-1",
    }
    assert (done / "clip.mxf").read_bytes() == b"x" * 42
    assert sorted(p.name for p in drop.iterdir()) == [".pop-watch-state.json", "notes.txt"]
    assert "clip.mxf: submitted (agenda agenda-1" in err
