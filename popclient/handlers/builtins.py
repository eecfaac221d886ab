"""The general-purpose built-in handlers: log, echo, sleep, fail, exec and http."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx

from popclient.handlers.process import run_subprocess, tail
from popclient.handlers.registry import Cancelled, HandlerError, OperationContext, PermanentError


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
        raise PermanentError("seconds must be ≥ 0", code="invalid_payload")
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
    """Fail with ``message``; with ``times: n`` fail only the first n attempts; with
    ``permanent: true`` fail for good (the agenda is not retried).

    The failure count is kept in the operation's params, so a retry (which gets the prior
    progress) knows how often it already failed.
    """
    payload = payload if isinstance(payload, Mapping) else {}
    message = str(payload.get("message", "operation failed on purpose"))
    times = payload.get("times")
    if times is None:
        failure = PermanentError if payload.get("permanent") else HandlerError
        raise failure(message, code=str(payload.get("code", "fail")))
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
        raise PermanentError(
            "exec payload must be an object with an argv list", code="invalid_payload"
        )
    argv = payload.get("argv")
    if isinstance(argv, str) or not isinstance(argv, list) or not argv:
        raise PermanentError(
            "argv must be a non-empty list of strings (exec never uses a shell)",
            code="invalid_payload",
        )
    if not all(isinstance(arg, str | int | float) and not isinstance(arg, bool) for arg in argv):
        raise PermanentError("argv items must be strings or numbers", code="invalid_payload")
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
            f"{result.argv[0]} exited with status {result.returncode}: {tail(result.stderr, 500)}",
            code="exit_status",
            detail={"returncode": result.returncode, "stderr": tail(result.stderr)},
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
        raise PermanentError("http payload needs a url", code="invalid_payload")
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
        # A 4xx says the request itself is wrong (a retry sends the same request), except a
        # time-out or a rate limit; a 5xx may pass.
        client_error = 400 <= response.status_code < 500 and response.status_code not in (408, 429)
        raise (PermanentError if client_error else HandlerError)(
            f"{method} {payload['url']} returned {response.status_code}",
            code="http_status",
            detail={"status": response.status_code, "body": content},
        )
    return {"status": response.status_code, "body": content}
