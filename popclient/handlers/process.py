"""Process control for handlers: run a program without a shell, stream its output, and stop
its whole process group when the operation is cancelled."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popclient.handlers.registry import Cancelled, HandlerError, OperationContext

# The name the handlers logged under before they were split into modules.
log = logging.getLogger("popclient.handlers")

_OUTPUT_LIMIT = 64 * 1024


@dataclass
class ProcessResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # it has already gone
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signum)
        elif signum == getattr(signal, "SIGKILL", None):
            process.kill()
        else:
            process.terminate()


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
        with contextlib.suppress(BrokenPipeError):  # the program exited without reading it
            process.stdin.write(stdin.encode())
            process.stdin.close()
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


def tail(text: str, limit: int = 2000) -> str:
    """The last ``limit`` characters of ``text``, marked with "…" when cut."""
    return text if len(text) <= limit else "…" + text[-limit:]
