"""Watching: following an agenda until it ends (the one-line progress, the loop behind
``agendas watch``, ``watch ID`` and every ``--wait``, and what a submit prints), and
``watch --dir``, a watch folder firing a trigger for each new file
(:mod:`popclient.watch_folder`)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from popclient import triggers
from popclient.cli.base import (
    EXIT_FAILURE,
    EXIT_OK,
    Context,
    UsageError,
    add_command,
    agenda_id,
    agenda_operations,
    agenda_percent,
    agenda_state,
    progress_bar,
)
from popclient.watch_folder import FileVersion, FolderWatcher, StateFileError, safe_text

SECRET_ENV = "POP_TRIGGER_SECRET"
DEFAULT_SETTLE_SECONDS = 10.0

TERMINAL_STATES = frozenset({"succeeded", "failed", "aborted"})


def _after_submit(ctx: Context, agenda: dict[str, Any], *, wait: bool) -> int:
    if wait:
        if not ctx.out.as_json:
            ctx.out.line(f"Submitted agenda {agenda.get('id')}")
        return _watch(ctx, str(agenda.get("id")), interval=1.0, max_wait=None)
    if ctx.out.as_json:
        ctx.out.json(agenda)
    else:
        insight = agenda.get("insight_name") or agenda.get("insight")
        ctx.out.line(
            f"Submitted agenda {agenda.get('id')} (state {agenda_state(agenda)}"
            + (f", insight {insight}" if insight else "")
            + ")"
        )
    return EXIT_OK


def _watch_line(agenda: dict[str, Any]) -> str:
    operations = agenda_operations(agenda)
    counts: dict[str, int] = {}
    for op in operations:
        counts[str(op.get("state"))] = counts.get(str(op.get("state")), 0) + 1
    running = [
        f"{op.get('name')} {float(op.get('percent_complete') or 0):.0f}%"
        for op in operations
        if op.get("state") == "executing"
    ]
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    text = f"{progress_bar(agenda_percent(agenda))} {agenda_percent(agenda):5.1f}%  "
    text += f"{agenda_state(agenda):<9}  {summary}"
    if running:
        text += "  | " + ", ".join(running)
    return text


def _watch(ctx: Context, agenda_id: str, *, interval: float, max_wait: float | None) -> int:
    client = ctx.client()
    out = ctx.out
    live = not out.as_json and hasattr(out.stdout, "isatty") and out.stdout.isatty()
    started = time.monotonic()
    last = ""
    while True:
        agenda = client.get_agenda(agenda_id)
        state = agenda_state(agenda)
        if not out.as_json:
            line = _watch_line(agenda)
            if live:
                out.stdout.write("\r\x1b[2K" + line)
                out.stdout.flush()
            elif line != last:
                out.line(line)
            last = line
        if state in TERMINAL_STATES:
            break
        if max_wait is not None and time.monotonic() - started >= max_wait:
            if live:
                out.line()
            out.error(f"agenda {agenda_id} still {state} after {max_wait:g}s")
            if out.as_json:
                out.json(agenda)
            return EXIT_FAILURE
        time.sleep(max(0.1, interval))
    if live:
        out.line()
    if out.as_json:
        out.json(agenda)
    elif state != "succeeded":
        message = (agenda.get("progress") or {}).get("message")
        out.error(f"agenda {agenda_id} {state}" + (f": {message}" if message else ""))
    return EXIT_OK if state == "succeeded" else EXIT_FAILURE


# -- pop watch ---------------------------------------------------------------------------

FOLDER_ONLY = (
    "trigger", "patterns", "recursive", "settle_seconds", "state_file", "move_to",
    "mark_suffix", "poll", "secret_file", "retry_refused",
)  # fmt: skip


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``watch``: an agenda until it ends, or a folder (``--dir``) for a trigger."""
    watch = add_command(
        commands,
        common,
        "watch",
        "follow an agenda until it ends (watch ID), or watch a folder and fire a trigger once "
        "for each file that stops growing (watch --dir PATH --trigger ID)",
    )
    watch.add_argument("id", nargs="?", help="the agenda to follow (not with --dir)")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between polls (1)")
    watch.add_argument("--max-wait", type=float, help="give up (exit 1) after this many seconds")
    folder = watch.add_argument_group("watch folder")
    folder.add_argument("--dir", dest="directory", metavar="PATH", help="the folder to watch")
    folder.add_argument("--trigger", metavar="ID", help="the trigger each settled file fires")
    folder.add_argument(
        "--secret-file", metavar="FILE",
        help=f"file holding the trigger's secret (env {SECRET_ENV}; never on the command line)",
    )  # fmt: skip
    # Refused with a clear message: a secret in argv leaks through ps.
    folder.add_argument("--secret", help=argparse.SUPPRESS)
    folder.add_argument(
        "--pattern", dest="patterns", action="append", metavar="GLOB",
        help="fire only files whose name (or relative path) matches; repeatable (every file)",
    )  # fmt: skip
    folder.add_argument("--recursive", action="store_true", default=None, help="sub-folders too")
    folder.add_argument(
        "--settle-seconds", type=float, metavar="S",
        help=f"a file fires once its size and mtime stay unchanged this long "
        f"({DEFAULT_SETTLE_SECONDS:g})",
    )  # fmt: skip
    folder.add_argument(
        "--state-file", metavar="FILE",
        help="what fired, kept across restarts (PATH/.pop-watch-state.json)",
    )  # fmt: skip
    finish = folder.add_mutually_exclusive_group()
    finish.add_argument("--move-to", metavar="DIR", help="move each fired file into DIR")
    finish.add_argument(
        "--mark-suffix", metavar="SUFFIX", help="rename each fired file NAME to NAME+SUFFIX"
    )
    folder.add_argument(
        "--poll", action="store_true", default=None,
        help="no file events (inotify): scan every settle interval only",
    )  # fmt: skip
    folder.add_argument(
        "--retry-refused", action="store_true", default=None,
        help="fire again the files the server refused (400/401/404) before",
    )  # fmt: skip
    watch.set_defaults(handler=cmd_watch)


def cmd_watch(ctx: Context) -> int:
    args = ctx.args
    if args.directory is None:
        given = [name for name in FOLDER_ONLY if getattr(args, name) is not None]
        if args.secret is not None:
            given.append("secret")
        if given:
            options = ", ".join("--" + name.replace("_", "-") for name in given)
            raise UsageError(f"{options}: only for a watch folder (--dir PATH --trigger ID)")
        if args.id is None:
            raise UsageError("watch what? give an agenda id, or --dir PATH --trigger ID")
        return _watch(ctx, agenda_id(ctx, args.id), interval=args.interval, max_wait=args.max_wait)
    if args.id is not None:
        raise UsageError(
            f"give an agenda id or --dir, not both (got {args.id!r} and --dir {args.directory})"
        )
    return _watch_folder(ctx)


def _trigger_secret(args: argparse.Namespace) -> str:
    if args.secret is not None:
        raise UsageError(
            "--secret is not accepted: the command line is visible to every user (ps); "
            f"set {SECRET_ENV} or use --secret-file"
        )
    if args.secret_file:
        try:
            text = Path(args.secret_file).expanduser().read_text()
        except OSError as exc:
            raise UsageError(f"cannot read the secret file {args.secret_file}: {exc}") from exc
        secret = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not secret:
            raise UsageError(f"the secret file {args.secret_file} is empty")
        return secret
    secret = os.environ.get(SECRET_ENV, "").strip()
    if not secret:
        raise UsageError(f"no trigger secret: use --secret-file FILE or set {SECRET_ENV}")
    return secret


def _folder_watcher(ctx: Context) -> tuple[FolderWatcher, bool]:
    args = ctx.args
    if not args.trigger:
        raise UsageError("--dir needs --trigger ID: the trigger each settled file fires")
    directory = Path(args.directory).expanduser()
    if not directory.is_dir():
        raise UsageError(f"--dir {args.directory}: not a directory")
    settle = DEFAULT_SETTLE_SECONDS if args.settle_seconds is None else args.settle_seconds
    if settle <= 0:
        raise UsageError("--settle-seconds must be more than 0")
    if args.move_to is not None:
        move_to = Path(args.move_to).expanduser()
        if move_to.resolve() == directory.resolve():
            raise UsageError("--move-to must be another folder than --dir")
        move_to.mkdir(parents=True, exist_ok=True)
    secret = _trigger_secret(args)
    url, _ = ctx.settings(need_token=False)
    fire = functools.partial(triggers.fire, url, args.trigger, secret, timeout=args.timeout)
    out = ctx.out

    def show(version: FileVersion, outcome: str, status: int, answer: dict[str, Any]) -> None:
        name = safe_text(version.relative_path)  # a name that is not UTF-8 still prints
        if out.as_json:  # one object per line, as they happen
            line = {"path": name, "outcome": outcome, "http_status": status}
            out.line(json.dumps({**line, **answer}, default=str))
        elif outcome == "fired":
            agenda = answer.get("agenda")
            out.line(
                f"{name}: {answer.get('status', status)}" + (f", agenda {agenda}" if agenda else "")
            )
        else:
            out.line(f"{name}: refused (HTTP {status})")
        out.stdout.flush()

    try:
        watcher = FolderWatcher(
            directory,
            args.trigger,
            lambda event, key: fire(event, idempotency_key=key),
            settle_seconds=settle,
            patterns=args.patterns or ("*",),
            recursive=bool(args.recursive),
            state_file=args.state_file,
            move_to=args.move_to,
            mark_suffix=args.mark_suffix,
            retry_refused=bool(args.retry_refused),
            on_outcome=show,
        )
    except StateFileError as exc:
        raise UsageError(str(exc)) from exc
    return watcher, bool(args.poll)


def _watch_folder(ctx: Context) -> int:
    """Run the watch folder until SIGTERM or Ctrl-C; the firing under way finishes first."""
    watcher, poll = _folder_watcher(ctx)
    if ctx.args.verbose < 2:  # a line per file event drowns the firings
        logging.getLogger("watchfiles").setLevel(logging.WARNING)
    if threading.current_thread() is not threading.main_thread():
        watcher.run(poll=poll)
        return EXIT_OK

    def on_signal(signum: int, frame: Any) -> None:
        watcher.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        watcher.run(poll=poll)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
