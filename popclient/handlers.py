"""Operation handlers: ``handler(payload, ctx) -> result``, registered by operation type.

A handler receives the operation's payload with every reference already resolved and an
:class:`OperationContext`. It returns a JSON-serialisable result (the operation's
``<name>.out``), raises :class:`HandlerError` (or any exception) to fail the operation,
and watches ``ctx.cancelled`` to stop early when the agenda is aborted or the operation
times out (raise :class:`Cancelled`, or just return).

Write your own in a module and start the worker with ``--handlers my.module``::

    from popclient.handlers import handler

    @handler("resize")
    def resize(payload, ctx):
        ctx.report_progress(50, "halfway")
        return {"ok": True}

A module may instead define ``HANDLERS = {"type": func}`` or ``register(registry)``.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger(__name__)

Handler = Callable[[Any, "OperationContext"], Any]

DEFAULT_CANCEL_GRACE_SECONDS = 1.0
_OUTPUT_LIMIT = 64 * 1024


class HandlerError(Exception):
    """Fail the operation with a clear message (and an optional diagnostic code/detail)."""

    def __init__(self, message: str, *, code: str = "handler_error", detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.detail = detail


class Cancelled(Exception):  # noqa: N818 - reads as an outcome, like asyncio.CancelledError
    """Raised by a handler that stopped because ``ctx.cancelled`` was set."""


class OperationContext:
    """What a handler gets besides its payload.

    ``prior`` is this operation's progress from the previous attempt (``state``,
    ``params``, ``diagnostics``, ``result``…) or ``None``; ``params`` starts as the prior
    params so a handler can resume; ``cancelled`` is set on abort, time-out or worker
    shutdown.
    """

    def __init__(
        self,
        *,
        agenda_id: str,
        operation_name: str,
        operation_type: str,
        operation: Mapping[str, Any] | None = None,
        prior: Mapping[str, Any] | None = None,
        cancelled: threading.Event | None = None,
        allow_exec: bool = False,
        cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        deadline: float | None = None,
        on_progress: Callable[[float | None, str | None, dict[str, Any] | None], None]
        | None = None,
        on_add_operations: Callable[[list[dict[str, Any]]], None] | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.agenda_id = agenda_id
        self.operation_name = operation_name
        self.operation_type = operation_type
        self.operation = dict(operation or {})
        self.prior = dict(prior) if prior else None
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.allow_exec = allow_exec
        self.cancel_grace_seconds = cancel_grace_seconds
        self.deadline = deadline
        self.settings = dict(settings or {})
        self.params: dict[str, Any] = dict((self.prior or {}).get("params") or {})
        self.log = logging.getLogger(f"popclient.op.{operation_type}")
        self._on_progress = on_progress
        self._on_add_operations = on_add_operations

    def report_progress(
        self,
        percent: float | None = None,
        message: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        """Record progress; ``params`` is merged into the operation's resume state."""
        if params:
            self.params.update(params)
        if self._on_progress is not None:
            self._on_progress(
                None if percent is None else max(0.0, min(100.0, float(percent))),
                message,
                dict(self.params) if params else None,
            )

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds``; returns True (early) when the operation is cancelled."""
        return self.cancelled.wait(max(0.0, seconds))

    def raise_if_cancelled(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled(f"operation {self.operation_name} cancelled")

    def add_operations(self, operations: Sequence[Mapping[str, Any]]) -> None:
        """Append generated operations to the running agenda (POP ``updateAgenda``)."""
        if self._on_add_operations is None:
            raise HandlerError("this runner cannot add operations")
        self._on_add_operations([dict(op) for op in operations])


# -- registry --------------------------------------------------------------------------

_DECLARED: dict[str, Handler] = {}


def handler(type_name: str) -> Callable[[Handler], Handler]:
    """Decorator declaring a handler for an operation type (picked up by every registry)."""

    def decorate(func: Handler) -> Handler:
        _DECLARED[type_name] = func
        return func

    return decorate


class HandlerRegistry:
    """Operation type → handler. Lookup is exact first, then case-insensitive."""

    def __init__(
        self,
        handlers: Mapping[str, Handler] | None = None,
        *,
        allow_exec: bool = False,
        cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self.allow_exec = allow_exec
        self.cancel_grace_seconds = cancel_grace_seconds
        self.settings = dict(settings or {})

    def register(self, type_name: str, func: Handler | None = None) -> Any:
        """``registry.register("t", f)`` or ``@registry.register("t")``."""
        if func is None:

            def decorate(inner: Handler) -> Handler:
                self._handlers[type_name] = inner
                return inner

            return decorate
        self._handlers[type_name] = func
        return func

    def get(self, type_name: str) -> Handler | None:
        if type_name in self._handlers:
            return self._handlers[type_name]
        lowered = type_name.lower()
        for name, func in self._handlers.items():
            if name.lower() == lowered:
                return func
        return None

    def __contains__(self, type_name: object) -> bool:
        return isinstance(type_name, str) and self.get(type_name) is not None

    def types(self) -> list[str]:
        return sorted(self._handlers)

    def load_module(self, module_path: str) -> None:
        """Import ``module_path`` and register its handlers.

        Picks up ``@handler`` declarations, a ``HANDLERS`` mapping and a
        ``register(registry)`` function, in that order.
        """
        module = importlib.import_module(module_path)
        self._handlers.update(_DECLARED)
        declared = getattr(module, "HANDLERS", None)
        if isinstance(declared, Mapping):
            self._handlers.update(declared)
        register = getattr(module, "register", None)
        if callable(register):
            register(self)


def default_registry(
    *,
    allow_exec: bool = False,
    modules: Sequence[str] = (),
    cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS,
) -> HandlerRegistry:
    """The built-in handlers, plus ``@handler`` declarations and the given modules."""
    registry = HandlerRegistry(
        BUILTIN_HANDLERS, allow_exec=allow_exec, cancel_grace_seconds=cancel_grace_seconds
    )
    registry._handlers.update(_DECLARED)
    for module_path in modules:
        registry.load_module(module_path)
    return registry


# -- subprocesses ----------------------------------------------------------------------


@dataclass
class ProcessResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signum)
        elif signum == getattr(signal, "SIGKILL", None):
            process.kill()
        else:
            process.terminate()
    except (ProcessLookupError, PermissionError):
        pass


def _reader(stream: Any, chunks: list[str], on_line: Callable[[str], None] | None) -> None:
    size = 0
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace")
        if on_line is not None:
            try:
                on_line(line.rstrip("\n"))
            except Exception:  # a progress parser must never kill the reader
                log.exception("progress callback failed")
        chunks.append(line)
        size += len(line)
        while size > _OUTPUT_LIMIT and len(chunks) > 1:
            size -= len(chunks.pop(0))
    stream.close()


def run_subprocess(
    argv: Sequence[str],
    ctx: OperationContext,
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    on_stdout_line: Callable[[str], None] | None = None,
    grace_seconds: float | None = None,
) -> ProcessResult:
    """Run ``argv`` (never through a shell) until it exits or ``ctx.cancelled`` is set.

    On cancel the process group gets SIGTERM, then SIGKILL after ``grace_seconds``
    (default ``ctx.cancel_grace_seconds``), and :class:`Cancelled` is raised. stdout and
    stderr keep their last 64 KiB.
    """
    args = [str(arg) for arg in argv]
    grace = ctx.cancel_grace_seconds if grace_seconds is None else grace_seconds
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update({str(k): str(v) for k, v in env.items()})
    try:
        process = subprocess.Popen(  # noqa: S603 - argv list, no shell, by design
            args,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise HandlerError(f"program not found: {args[0]}", code="program_not_found") from exc
    except PermissionError as exc:
        raise HandlerError(f"program not executable: {args[0]}", code="program_not_found") from exc
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=_reader, args=(process.stdout, out, on_stdout_line), daemon=True),
        threading.Thread(target=_reader, args=(process.stderr, err, None), daemon=True),
    ]
    for reader in readers:
        reader.start()
    if stdin is not None and process.stdin is not None:
        try:
            process.stdin.write(stdin.encode())
            process.stdin.close()
        except BrokenPipeError:
            pass
    cancelled = False
    while process.poll() is None:
        if ctx.cancelled.wait(0.05):
            cancelled = True
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=max(0.0, grace))
            except subprocess.TimeoutExpired:
                _signal_group(process, getattr(signal, "SIGKILL", signal.SIGTERM))
                process.wait()
            break
    for reader in readers:
        reader.join(timeout=2.0)
    if cancelled:
        raise Cancelled(f"{args[0]} stopped (exit status {process.returncode})")
    return ProcessResult(args, process.returncode, "".join(out), "".join(err))


def _tail(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


# -- built-in handlers -----------------------------------------------------------------


def _result_or(payload: Any, default: Any) -> Any:
    if isinstance(payload, Mapping) and "result" in payload:
        return payload["result"]
    return default


def log_handler(payload: Any, ctx: OperationContext) -> Any:
    """Log ``message`` (or ``messages``/POP's ``logMessages``); returns them or ``result``."""
    messages: list[Any] = []
    if isinstance(payload, Mapping):
        if "message" in payload:
            messages.append(payload["message"])
        for key in ("messages", "logMessages"):
            value = payload.get(key)
            if isinstance(value, list):
                messages.extend(value)
    else:
        messages.append(payload)
    level = logging.INFO
    if isinstance(payload, Mapping) and isinstance(payload.get("level"), str):
        level = logging.getLevelName(payload["level"].upper())
        level = level if isinstance(level, int) else logging.INFO
    for message in messages:
        text = message if isinstance(message, str) else json.dumps(message)
        ctx.log.log(level, "[%s/%s] %s", ctx.agenda_id, ctx.operation_name, text)
    return _result_or(payload, {"messages": messages})


def echo_handler(payload: Any, ctx: OperationContext) -> Any:
    """Return the (resolved) payload: shows what references resolved to."""
    return payload


def sleep_handler(payload: Any, ctx: OperationContext) -> Any:
    """Sleep ``seconds``, reporting percent; stops early when cancelled."""
    seconds = float((payload or {}).get("seconds", 1)) if isinstance(payload, Mapping) else 1.0
    if seconds < 0:
        raise HandlerError("seconds must be ≥ 0")
    start = time.monotonic()
    end = start + seconds
    step = min(0.25, max(0.01, seconds / 100))
    last_percent = -1
    while True:
        now = time.monotonic()
        if now >= end:
            break
        percent = int((now - start) / seconds * 100) if seconds else 100
        if percent != last_percent:
            ctx.report_progress(percent)
            last_percent = percent
        if ctx.sleep(min(step, end - now)):
            raise Cancelled(f"sleep cancelled after {time.monotonic() - start:.2f}s")
    ctx.report_progress(100)
    return _result_or(payload, {"slept_seconds": round(time.monotonic() - start, 3)})


def fail_handler(payload: Any, ctx: OperationContext) -> Any:
    """Fail with ``message``; with ``times: n`` fail only the first n attempts.

    The failure count is kept in the operation's params, so a retry (which gets the prior
    progress) knows how often it already failed.
    """
    payload = payload if isinstance(payload, Mapping) else {}
    message = str(payload.get("message", "operation failed on purpose"))
    times = payload.get("times")
    if times is None:
        raise HandlerError(message, code=str(payload.get("code", "fail")))
    failures = int(ctx.params.get("failures", 0))
    if failures < int(times):
        ctx.report_progress(params={"failures": failures + 1})
        raise HandlerError(
            f"{message} (failure {failures + 1} of {times})", code=str(payload.get("code", "fail"))
        )
    return _result_or(payload, {"failures": failures})


def exec_handler(payload: Any, ctx: OperationContext) -> Any:
    """Run ``argv`` (a list; never a shell). Only on workers started with ``--allow-exec``.

    Payload: ``argv``, optional ``cwd``, ``env`` (added to the worker's), ``stdin``,
    ``ok_returncodes`` (default ``[0]``), ``parse_json`` (parse stdout into ``json``),
    ``grace_seconds`` (SIGTERM → SIGKILL on cancel). Result: ``{returncode, stdout,
    stderr[, json]}``.
    """
    if not ctx.allow_exec:
        raise HandlerError(
            "exec operations are disabled on this worker; start it with --allow-exec",
            code="exec_not_allowed",
        )
    if not isinstance(payload, Mapping):
        raise HandlerError("exec payload must be an object with an argv list")
    argv = payload.get("argv")
    if isinstance(argv, str) or not isinstance(argv, list) or not argv:
        raise HandlerError(
            "argv must be a non-empty list of strings (exec never uses a shell)",
            code="invalid_payload",
        )
    if not all(isinstance(arg, str | int | float) and not isinstance(arg, bool) for arg in argv):
        raise HandlerError("argv items must be strings or numbers", code="invalid_payload")
    env = payload.get("env")
    result = run_subprocess(
        argv,
        ctx,
        cwd=payload.get("cwd"),
        env=env if isinstance(env, Mapping) else None,
        stdin=payload.get("stdin"),
        grace_seconds=payload.get("grace_seconds"),
    )
    output: dict[str, Any] = {
        "returncode": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
    }
    ok_codes = payload.get("ok_returncodes") or [0]
    if result.returncode not in ok_codes:
        raise HandlerError(
            f"{result.argv[0]} exited with status {result.returncode}: {_tail(result.stderr, 500)}",
            code="exit_status",
            detail={"returncode": result.returncode, "stderr": _tail(result.stderr)},
        )
    if payload.get("parse_json"):
        try:
            output["json"] = json.loads(result.stdout)
        except ValueError as exc:
            raise HandlerError(f"stdout is not JSON: {exc}", code="invalid_output") from exc
    return output


def http_handler(payload: Any, ctx: OperationContext) -> Any:
    """Make one HTTP call: ``method`` (GET), ``url``, ``body`` (JSON), ``headers``,
    ``timeout`` (30 s), ``fail_on_status`` (true: 4xx/5xx fail the operation).

    Result: ``{status, body}`` with the body decoded from JSON when it is JSON.
    """
    if not isinstance(payload, Mapping) or not payload.get("url"):
        raise HandlerError("http payload needs a url", code="invalid_payload")
    method = str(payload.get("method", "GET")).upper()
    kwargs: dict[str, Any] = {"headers": payload.get("headers") or {}}
    if "body" in payload:
        body = payload["body"]
        if isinstance(body, str):
            kwargs["content"] = body.encode()
        else:
            kwargs["json"] = body
    timeout = float(payload.get("timeout", 30))
    try:
        response = httpx.request(method, str(payload["url"]), timeout=timeout, **kwargs)
    except httpx.HTTPError as exc:
        raise HandlerError(f"{method} {payload['url']} failed: {exc}", code="http_error") from exc
    try:
        content: Any = response.json()
    except ValueError:
        content = response.text
    if payload.get("fail_on_status", True) and response.status_code >= 400:
        raise HandlerError(
            f"{method} {payload['url']} returned {response.status_code}",
            code="http_status",
            detail={"status": response.status_code, "body": content},
        )
    return {"status": response.status_code, "body": content}


# -- media (ffprobe / ffmpeg) ----------------------------------------------------------


def _require_program(program: str, operation_type: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise HandlerError(
            f"'{operation_type}' operations need {program}, which is not installed on this "
            f"worker (not found on PATH). Install ffmpeg (Debian: apt-get install ffmpeg) "
            f"or route '{operation_type}' operations to an insight whose workers have it.",
            code="missing_program",
        )
    return path


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _rate(value: Any) -> float | None:
    if not isinstance(value, str) or "/" not in value:
        return _number(value)
    numerator, _, denominator = value.partition("/")
    num, den = _number(numerator), _number(denominator)
    if num is None or not den:
        return None
    return round(num / den, 3)


def summarize_probe(probe: Mapping[str, Any]) -> dict[str, Any]:
    """The fields people reference most, from ffprobe's ``-show_format -show_streams``."""
    fmt = probe.get("format") or {}
    streams = probe.get("streams") or []
    video = next((s for s in streams if s.get("codec_type") == "video"), None)
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    summary: dict[str, Any] = {
        "format": fmt.get("format_name"),
        "duration": _number(fmt.get("duration")),
        "size": int(fmt["size"]) if str(fmt.get("size", "")).isdigit() else None,
        "bit_rate": int(fmt["bit_rate"]) if str(fmt.get("bit_rate", "")).isdigit() else None,
        "streams": len(streams),
        "has_video": video is not None,
        "has_audio": audio is not None,
    }
    if video is not None:
        summary.update(
            video_codec=video.get("codec_name"),
            width=video.get("width"),
            height=video.get("height"),
            frame_rate=_rate(video.get("avg_frame_rate") or video.get("r_frame_rate")),
        )
    if audio is not None:
        summary.update(
            audio_codec=audio.get("codec_name"),
            sample_rate=int(audio["sample_rate"])
            if str(audio.get("sample_rate", "")).isdigit()
            else None,
            channels=audio.get("channels"),
        )
    return summary


def _probe(path: str, ctx: OperationContext, operation_type: str) -> dict[str, Any]:
    ffprobe = _require_program("ffprobe", operation_type)
    result = run_subprocess(
        [ffprobe, "-v", "error", "-print_format", "json", "-show_format", "-show_streams", path],
        ctx,
    )
    if result.returncode != 0:
        raise HandlerError(
            f"ffprobe could not read {path}: {_tail(result.stderr, 500).strip()}",
            code="probe_failed",
        )
    try:
        return json.loads(result.stdout)
    except ValueError as exc:
        raise HandlerError(f"ffprobe printed invalid JSON: {exc}", code="probe_failed") from exc


def _input_output(payload: Any, *, need_output: bool = True) -> tuple[str, str]:
    if not isinstance(payload, Mapping) or not payload.get("input"):
        raise HandlerError("payload needs an input (path or URL)", code="invalid_payload")
    output = payload.get("output")
    if need_output and not output:
        raise HandlerError("payload needs an output path", code="invalid_payload")
    if output:
        directory = os.path.dirname(str(output))
        if directory:
            os.makedirs(directory, exist_ok=True)
    return str(payload["input"]), str(output or "")


def mediainfo_handler(payload: Any, ctx: OperationContext) -> Any:
    """ffprobe ``input``: result is ffprobe's JSON (``format``, ``streams``) plus ``summary``."""
    source, _ = _input_output(payload, need_output=False)
    probe = _probe(source, ctx, "mediainfo")
    probe["summary"] = summarize_probe(probe)
    return probe


def _run_ffmpeg(
    arguments: list[str], ctx: OperationContext, operation_type: str, duration: float | None
) -> None:
    ffmpeg = _require_program("ffmpeg", operation_type)
    last = [-1]

    def on_line(line: str) -> None:
        key, _, value = line.partition("=")
        if key in ("out_time_us", "out_time_ms") and duration:
            seconds = (_number(value) or 0) / 1_000_000
            percent = int(min(99, seconds / duration * 100))
            if percent > last[0]:
                last[0] = percent
                ctx.report_progress(percent)

    argv = [ffmpeg, "-hide_banner", "-nostdin", "-nostats", "-progress", "pipe:1", *arguments]
    result = run_subprocess(argv, ctx, on_stdout_line=on_line)
    if result.returncode != 0:
        raise HandlerError(
            f"ffmpeg failed with status {result.returncode}: {_tail(result.stderr, 800).strip()}",
            code="ffmpeg_failed",
            detail={"argv": argv, "stderr": _tail(result.stderr)},
        )
    ctx.report_progress(100)


def _media_duration(source: str, payload: Mapping[str, Any], ctx: OperationContext) -> float | None:
    if payload.get("duration") is not None:
        return _number(payload["duration"])
    if shutil.which("ffprobe") is None:
        return None
    try:
        return summarize_probe(_probe(source, ctx, "transcode")).get("duration")
    except HandlerError:
        return None


def transcode_handler(payload: Any, ctx: OperationContext) -> Any:
    """ffmpeg ``input`` → ``output``. Optional: ``video_codec``, ``audio_codec``, ``width``,
    ``height``, ``video_bitrate``, ``audio_bitrate``, ``preset``, ``input_args`` (list, before
    ``-i``), ``extra_args`` (list, output options),
    ``overwrite`` (true). Reports percent from ffmpeg's progress. Result: ``{output,
    size_bytes, summary?}``."""
    source, output = _input_output(payload)
    _require_program("ffmpeg", "transcode")
    input_args = payload.get("input_args") or []
    if not isinstance(input_args, list):
        raise HandlerError("input_args must be a list", code="invalid_payload")
    arguments: list[str] = ["-y" if payload.get("overwrite", True) else "-n"]
    arguments += [str(arg) for arg in input_args]
    arguments += ["-i", source]
    options = [
        ("video_codec", "-c:v"),
        ("video_bitrate", "-b:v"),
        ("preset", "-preset"),
        ("audio_codec", "-c:a"),
        ("audio_bitrate", "-b:a"),
    ]
    for key, flag in options:
        if payload.get(key) is not None:
            arguments += [flag, str(payload[key])]
    width, height = payload.get("width"), payload.get("height")
    if width is not None or height is not None:
        arguments += [
            "-vf",
            f"scale={width if width is not None else -2}:{height if height is not None else -2}",
        ]
    extra = payload.get("extra_args") or []
    if not isinstance(extra, list):
        raise HandlerError("extra_args must be a list", code="invalid_payload")
    arguments += [str(arg) for arg in extra]
    arguments.append(output)
    _run_ffmpeg(arguments, ctx, "transcode", _media_duration(source, payload, ctx))
    result: dict[str, Any] = {"output": output, "size_bytes": os.path.getsize(output)}
    if shutil.which("ffprobe") is not None:
        result["summary"] = summarize_probe(_probe(output, ctx, "transcode"))
    return result


def thumbnail_handler(payload: Any, ctx: OperationContext) -> Any:
    """One frame of ``input`` at ``at_seconds`` (0) into ``output`` (an image path),
    optionally scaled to ``width``. Result: ``{output, size_bytes}``."""
    source, output = _input_output(payload)
    _require_program("ffmpeg", "thumbnail")
    at = _number(payload.get("at_seconds", 0)) or 0.0
    arguments = ["-y", "-ss", f"{at:.3f}", "-i", source, "-frames:v", "1"]
    if payload.get("width") is not None:
        arguments += ["-vf", f"scale={int(payload['width'])}:-2"]
    arguments.append(output)
    _run_ffmpeg(arguments, ctx, "thumbnail", None)
    if not os.path.exists(output):
        raise HandlerError(f"ffmpeg wrote no frame at {at}s (past the end?)", code="ffmpeg_failed")
    return {"output": output, "size_bytes": os.path.getsize(output)}


BUILTIN_HANDLERS: dict[str, Handler] = {
    "log": log_handler,
    "echo": echo_handler,
    "sleep": sleep_handler,
    "fail": fail_handler,
    "exec": exec_handler,
    "http": http_handler,
    "mediainfo": mediainfo_handler,
    "transcode": transcode_handler,
    "thumbnail": thumbnail_handler,
}
