"""Built-in handlers, the registry and subprocess cancellation."""

import http.server
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from popclient.handlers import (
    Cancelled,
    HandlerError,
    OperationContext,
    PermanentError,
    default_registry,
    exec_handler,
    fail_handler,
    http_handler,
    log_handler,
    mediainfo_handler,
    package_handler,
    sleep_handler,
    thumbnail_handler,
    transcode_handler,
)
from tests.media import generated_clip

FFMPEG = shutil.which("ffmpeg") is not None and shutil.which("ffprobe") is not None


class Progress:
    def __init__(self):
        self.calls = []

    def __call__(self, percent, message, params):
        self.calls.append((percent, message, params))

    @property
    def percents(self):
        return [percent for percent, _, _ in self.calls if percent is not None]


def make_ctx(*, allow_exec=False, prior=None, grace=1.0, name="op"):
    progress = Progress()
    ctx = OperationContext(
        agenda_id="agenda-1",
        operation_name=name,
        operation_type="test",
        prior=prior,
        allow_exec=allow_exec,
        cancel_grace_seconds=grace,
        on_progress=progress,
    )
    return ctx, progress


def cancel_after(ctx, seconds):
    timer = threading.Timer(seconds, ctx.cancelled.set)
    timer.start()
    return timer


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


# -- log, sleep, fail ------------------------------------------------------------------


def test_log_returns_its_messages_or_the_given_result(caplog):
    ctx, _ = make_ctx()
    caplog.set_level("INFO")

    assert log_handler({"message": "hello", "logMessages": ["a", "b"]}, ctx) == {
        "messages": ["hello", "a", "b"]
    }
    assert log_handler({"message": "x", "result": {"k": 1}}, ctx) == {"k": 1}
    assert "[agenda-1/op] hello" in caplog.text


def test_sleep_reports_increasing_percent_up_to_100():
    ctx, progress = make_ctx()

    result = sleep_handler({"seconds": 0.3}, ctx)

    assert result["slept_seconds"] >= 0.3
    percents = progress.percents
    assert percents[0] == 0 and percents[-1] == 100
    assert percents == sorted(percents)
    assert len(percents) >= 5


def test_sleep_returns_early_when_cancelled():
    ctx, _ = make_ctx()
    cancel_after(ctx, 0.1)
    started = time.monotonic()

    with pytest.raises(Cancelled):
        sleep_handler({"seconds": 30}, ctx)

    assert time.monotonic() - started < 0.6


def test_fail_always_fails_with_its_message():
    ctx, _ = make_ctx()

    with pytest.raises(HandlerError, match="nope") as caught:
        fail_handler({"message": "nope", "code": "E42"}, ctx)

    assert caught.value.code == "E42"


def test_fail_times_counts_failures_in_params_from_prior_progress():
    ctx, progress = make_ctx(prior={"state": "failed", "params": {"failures": 1}})

    with pytest.raises(HandlerError, match="failure 2 of 2"):
        fail_handler({"times": 2}, ctx)
    assert progress.calls[-1][2] == {"failures": 2}

    ctx, _ = make_ctx(prior={"state": "failed", "params": {"failures": 2}})
    assert fail_handler({"times": 2, "result": "ok"}, ctx) == "ok"


# -- exec ------------------------------------------------------------------------------


def test_exec_is_refused_without_allow_exec():
    ctx, _ = make_ctx(allow_exec=False)

    with pytest.raises(HandlerError, match="--allow-exec") as caught:
        exec_handler({"argv": ["true"]}, ctx)

    assert caught.value.code == "exec_not_allowed"


def test_exec_runs_argv_without_a_shell():
    ctx, _ = make_ctx(allow_exec=True)

    result = exec_handler({"argv": ["echo", "$HOME; echo injected", "|", "cat"]}, ctx)

    assert result == {"returncode": 0, "stdout": "$HOME; echo injected | cat\n", "stderr": ""}


def test_exec_refuses_a_command_string():
    ctx, _ = make_ctx(allow_exec=True)

    with pytest.raises(HandlerError, match="never uses a shell"):
        exec_handler({"argv": "echo hi; rm -rf /"}, ctx)


def test_exec_env_stdin_and_json_output():
    ctx, _ = make_ctx(allow_exec=True)
    script = (
        "import json,os,sys; print(json.dumps({'v': os.environ['POP_V'], 'in': sys.stdin.read()}))"
    )

    result = exec_handler(
        {
            "argv": [sys.executable, "-c", script],
            "env": {"POP_V": "7"},
            "stdin": "data",
            "parse_json": True,
        },
        ctx,
    )

    assert result["json"] == {"v": "7", "in": "data"}


def test_exec_nonzero_exit_fails_with_stderr():
    ctx, _ = make_ctx(allow_exec=True)

    with pytest.raises(HandlerError, match="exited with status 3: bad thing") as caught:
        exec_handler(
            {
                "argv": [
                    sys.executable,
                    "-c",
                    "import sys; sys.stderr.write('bad thing'); sys.exit(3)",
                ]
            },
            ctx,
        )

    assert caught.value.code == "exit_status"
    assert caught.value.detail["returncode"] == 3


def test_exec_missing_program_is_a_clear_error():
    ctx, _ = make_ctx(allow_exec=True)

    with pytest.raises(HandlerError, match="program not found: /no/such/program"):
        exec_handler({"argv": ["/no/such/program"]}, ctx)


def test_exec_cancel_terminates_the_subprocess_within_two_seconds(tmp_path):
    pid_file = tmp_path / "pid"
    ctx, _ = make_ctx(allow_exec=True)
    script = f"import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(60)"
    cancel_after(ctx, 0.3)
    started = time.monotonic()

    with pytest.raises(Cancelled):
        exec_handler({"argv": [sys.executable, "-c", script]}, ctx)

    assert time.monotonic() - started < 2.0
    assert not pid_alive(int(pid_file.read_text()))


def test_exec_cancel_kills_a_process_that_ignores_sigterm(tmp_path):
    pid_file = tmp_path / "pid"
    ctx, _ = make_ctx(allow_exec=True, grace=0.5)
    script = textwrap.dedent(
        f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(pid_file)!r}, 'w').write(str(os.getpid()))
        time.sleep(60)
        """
    )
    threading.Thread(
        target=lambda: (_wait_for(pid_file), time.sleep(0.1), ctx.cancelled.set())
    ).start()
    started = time.monotonic()

    with pytest.raises(Cancelled):
        exec_handler({"argv": [sys.executable, "-c", script]}, ctx)

    elapsed = time.monotonic() - started
    assert elapsed < 2.0
    assert not pid_alive(int(pid_file.read_text()))


def test_exec_cancel_also_kills_grandchildren(tmp_path):
    pid_file = tmp_path / "pid"
    ctx, _ = make_ctx(allow_exec=True)
    child = f"import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(60)"
    parent = f"import subprocess,sys; subprocess.run([sys.executable, '-c', {child!r}])"
    threading.Thread(target=lambda: (_wait_for(pid_file), ctx.cancelled.set())).start()

    with pytest.raises(Cancelled):
        exec_handler({"argv": [sys.executable, "-c", parent]}, ctx)

    deadline = time.monotonic() + 2
    while pid_alive(int(pid_file.read_text())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(int(pid_file.read_text()))


def _wait_for(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return
        time.sleep(0.02)


# -- http ------------------------------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"null")
        status = {"/ok": 201, "/gone": 404, "/busy": 429}.get(self.path, 500)
        data = json.dumps({"got": body, "path": self.path}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        data = b"plain text"
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_http_returns_status_and_json_body(http_server):
    ctx, _ = make_ctx()

    result = http_handler(
        {"method": "post", "url": f"{http_server}/ok", "body": {"a": [1, True]}}, ctx
    )

    assert result == {"status": 201, "body": {"got": {"a": [1, True]}, "path": "/ok"}}


def test_http_text_body_and_error_status(http_server):
    ctx, _ = make_ctx()

    assert http_handler({"url": f"{http_server}/x"}, ctx) == {"status": 200, "body": "plain text"}
    with pytest.raises(HandlerError, match="returned 500"):
        http_handler({"method": "POST", "url": f"{http_server}/bad", "body": {}}, ctx)
    tolerant = http_handler(
        {"method": "POST", "url": f"{http_server}/bad", "body": {}, "fail_on_status": False}, ctx
    )
    assert tolerant["status"] == 500


def test_http_client_errors_are_permanent_but_rate_limits_and_server_errors_are_not(http_server):
    ctx, _ = make_ctx()

    with pytest.raises(PermanentError, match="returned 404"):
        http_handler({"method": "POST", "url": f"{http_server}/gone", "body": {}}, ctx)
    for path in ("/busy", "/bad"):
        with pytest.raises(HandlerError) as caught:
            http_handler({"method": "POST", "url": f"{http_server}{path}", "body": {}}, ctx)
        assert not isinstance(caught.value, PermanentError)


def test_missing_or_invalid_payloads_are_permanent():
    ctx, _ = make_ctx()

    for handler, payload in [
        (http_handler, {}),
        (mediainfo_handler, {}),
        (transcode_handler, {"input": "x.mp4"}),
        (sleep_handler, {"seconds": -1}),
        (fail_handler, {"permanent": True}),
    ]:
        with pytest.raises(PermanentError):
            handler(payload, ctx)


def test_http_connection_failure_is_a_handler_error():
    ctx, _ = make_ctx()

    with pytest.raises(HandlerError, match="failed"):
        http_handler({"url": "http://127.0.0.1:9/nothing", "timeout": 2}, ctx)


# -- registry --------------------------------------------------------------------------


def test_registry_has_builtins_and_loads_a_handlers_module(tmp_path, monkeypatch):
    (tmp_path / "farm_handlers.py").write_text(
        textwrap.dedent(
            """
            from popclient.handlers import handler

            @handler("resize")
            def resize(payload, ctx):
                return {"resized": payload["w"]}

            HANDLERS = {"crop": lambda payload, ctx: "cropped"}

            def register(registry):
                registry.register("rotate", lambda payload, ctx: "rotated")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    registry = default_registry(allow_exec=True, modules=["farm_handlers"])

    assert {"log", "sleep", "fail", "exec", "http", "mediainfo", "transcode", "thumbnail"} <= set(
        registry.types()
    )
    assert {"resize", "crop", "rotate"} <= set(registry.types())
    assert registry.get("RESIZE")({"w": 3}, None) == {"resized": 3}
    assert registry.allow_exec is True
    assert "nothing" not in registry


# -- media -----------------------------------------------------------------------------


@pytest.fixture
def clip(tmp_path):
    """A 2 s 160x120 clip with audio, made by ffmpeg (only when ffmpeg is installed)."""
    return generated_clip(tmp_path / "clip.mp4")


@pytest.fixture
def no_ffmpeg_on_path(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


def _media_calls(clip, tmp_path):
    return [
        (mediainfo_handler, {"input": str(clip)}, "ffprobe"),
        (transcode_handler, {"input": str(clip), "output": str(tmp_path / "o.mp4")}, "ffmpeg"),
        (thumbnail_handler, {"input": str(clip), "output": str(tmp_path / "t.png")}, "ffmpeg"),
    ]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["mediainfo", "transcode", "thumbnail"])
def test_media_handlers_without_ffmpeg_fail_with_a_clear_error(index, tmp_path, no_ffmpeg_on_path):
    handler, payload, program = _media_calls(tmp_path / "in.mp4", tmp_path)[index]
    ctx, _ = make_ctx()

    with pytest.raises(HandlerError) as caught:
        handler(payload, ctx)

    assert caught.value.code == "missing_program"
    assert f"need {program}, which is not installed on this worker" in caught.value.message


# CI installs ffmpeg (.ci/run): there these run, and fail if it is missing.
if FFMPEG or os.environ.get("CI") == "true":

    def test_mediainfo_probes_a_generated_clip(clip):
        ctx, _ = make_ctx()

        result = mediainfo_handler({"input": str(clip)}, ctx)

        summary = result["summary"]
        assert summary["width"] == 160 and summary["height"] == 120
        assert summary["video_codec"] == "h264" and summary["audio_codec"] == "aac"
        assert summary["has_audio"] is True
        assert 1.9 <= summary["duration"] <= 2.2
        assert summary["frame_rate"] == 25
        assert {s["codec_type"] for s in result["streams"]} == {"video", "audio"}

    def test_transcode_scales_a_generated_clip_and_reports_progress(clip, tmp_path):
        ctx, progress = make_ctx()
        output = tmp_path / "out" / "small.mp4"

        result = transcode_handler(
            {"input": str(clip), "output": str(output), "width": 80, "video_codec": "libx264"},
            ctx,
        )

        assert result["output"] == str(output)
        assert result["size_bytes"] == output.stat().st_size > 0
        assert result["outputs"] == [
            {"path": str(output), "kind": "video", "bytes": output.stat().st_size}
        ]
        assert (result["summary"]["width"], result["summary"]["height"]) == (80, 60)
        assert progress.percents[-1] == 100

    def test_thumbnail_writes_one_frame(clip, tmp_path):
        ctx, _ = make_ctx()
        output = tmp_path / "thumb.png"

        result = thumbnail_handler(
            {"input": str(clip), "output": str(output), "at_seconds": 1, "width": 64}, ctx
        )

        size = output.stat().st_size
        assert result == {
            "output": str(output),
            "size_bytes": size,
            "outputs": [{"path": str(output), "kind": "image", "bytes": size}],
        }
        assert output.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def test_mediainfo_of_a_missing_file_fails_clearly(tmp_path):
        ctx, _ = make_ctx()

        with pytest.raises(HandlerError, match="ffprobe could not read"):
            mediainfo_handler({"input": str(tmp_path / "missing.mp4")}, ctx)

    def test_a_missing_local_input_is_a_permanent_error_for_every_media_handler(tmp_path):
        for handler, payload, _ in _media_calls(tmp_path / "missing.mp4", tmp_path):
            ctx, _ = make_ctx()
            with pytest.raises(PermanentError):
                handler(payload, ctx)

    def _probe_streams(path):
        result = subprocess.run(
            ["ffprobe", "-v", "error", "-print_format", "json", "-show_streams", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(result.stdout)["streams"]

    def test_package_writes_playable_hls_and_dash_with_two_renditions(clip, tmp_path):
        ctx, progress = make_ctx()
        out = tmp_path / "packaged"

        result = package_handler(
            {
                "input": str(clip),
                "output_dir": str(out),
                "segment_seconds": 1,
                "renditions": [{"height": 120, "video_bitrate": "300k"}, {"height": 60}],
            },
            ctx,
        )

        master = out / "hls" / "master.m3u8"
        assert result["hls"] == str(master)
        assert master.read_text().count("#EXT-X-STREAM-INF") == 2
        assert sorted(p.name for p in (out / "hls").iterdir()) == [
            "master.m3u8",
            "stream_0",
            "stream_1",
        ]
        assert len(list((out / "hls" / "stream_0").glob("segment_*.ts"))) >= 2
        hls_heights = {
            s.get("height") for s in _probe_streams(master) if s["codec_type"] == "video"
        }
        assert hls_heights == {120, 60}
        manifest = out / "dash" / "manifest.mpd"
        assert result["dash"] == str(manifest)
        dash = _probe_streams(manifest)
        assert {s.get("height") for s in dash if s["codec_type"] == "video"} == {120, 60}
        assert any(s["codec_type"] == "audio" for s in dash)
        assert [(o["kind"], o["path"]) for o in result["outputs"]] == [
            ("hls", str(master)),
            ("dash", str(manifest)),
        ]
        assert all(o["bytes"] > 0 for o in result["outputs"])
        assert progress.percents[-1] == 100
        assert progress.percents == sorted(progress.percents)

    def test_package_refuses_payloads_it_cannot_use_for_good(clip, tmp_path):
        ctx, _ = make_ctx()
        for payload in [
            {"input": str(clip)},
            {"input": str(clip), "output_dir": str(tmp_path), "formats": ["smooth"]},
            {"input": str(clip), "output_dir": str(tmp_path), "renditions": [{"height": "hd"}]},
            {"input": str(clip), "output_dir": str(tmp_path), "segment_seconds": 0},
            {"input": str(tmp_path / "missing.mp4"), "output_dir": str(tmp_path)},
        ]:
            with pytest.raises(PermanentError):
                package_handler(payload, ctx)

    def test_transcode_cancel_stops_ffmpeg(clip, tmp_path):
        ctx, _ = make_ctx()
        cancel_after(ctx, 0.3)
        started = time.monotonic()

        with pytest.raises(Cancelled):
            transcode_handler(
                {
                    "input": str(clip),
                    "output": str(tmp_path / "long.mp4"),
                    "input_args": ["-stream_loop", "-1"],
                    "duration": 1000,
                },
                ctx,
            )

        assert time.monotonic() - started < 2.0

else:

    def test_media_handlers_report_ffmpeg_missing_on_this_machine(tmp_path):
        for handler, payload, program in _media_calls(tmp_path / "in.mp4", tmp_path):
            ctx, _ = make_ctx()
            with pytest.raises(HandlerError, match=f"need {program}"):
                handler(payload, ctx)
