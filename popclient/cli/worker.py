"""``pop worker``: run a :class:`popclient.worker.Worker` for one insight; SIGTERM or SIGINT
drains it, a second signal hands its agendas back at once."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from popclient.cli.base import Context, UsageError, add_command
from popclient.handlers import default_registry
from popclient.worker import Worker


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``worker``."""
    worker = add_command(commands, common, "worker", "pull and run agendas of one insight")
    worker.add_argument("--insight", required=True, help="insight id or name")
    worker.add_argument("--concurrency", type=int, default=1, help="agendas at once (1)")
    worker.add_argument("--batch", type=int, default=1, help="agendas per pull; >1 batches reports")
    worker.add_argument("--parallel", type=int, default=8, help="operations at once per agenda (8)")
    worker.add_argument(
        "--handlers", action="append", default=[], metavar="MODULE",
        help="import handlers from this module (repeatable)",
    )  # fmt: skip
    worker.add_argument("--allow-exec", action="store_true", help="enable the exec handler")
    worker.add_argument("--name", help="worker name reported to the server (host-pid)")
    worker.add_argument("--wait-seconds", type=float, default=10.0, help="long-poll wait (10)")
    worker.add_argument(
        "--drain-seconds", type=float, default=30.0,
        help="on SIGTERM, time running agendas get to finish before being handed back (30)",
    )  # fmt: skip
    worker.add_argument("--max-agendas", type=int, help="exit after running this many agendas")
    worker.add_argument("--idle-exit", type=float, help="exit after this many idle seconds")
    worker.set_defaults(handler=cmd_worker)


def cmd_worker(ctx: Context) -> int:
    args = ctx.args
    modules = [m.strip() for value in args.handlers for m in value.split(",") if m.strip()]
    try:
        registry = default_registry(allow_exec=args.allow_exec, modules=modules)
    except ImportError as exc:
        raise UsageError(f"cannot import handlers: {exc}") from exc
    worker = Worker(
        ctx.client(),
        args.insight,
        registry=registry,
        name=args.name,
        concurrency=args.concurrency,
        batch=args.batch,
        parallel=args.parallel,
        wait_seconds=args.wait_seconds,
        drain_seconds=args.drain_seconds,
        max_agendas=args.max_agendas,
        idle_exit_seconds=args.idle_exit,
    )
    if threading.current_thread() is not threading.main_thread():
        return worker.run()
    signals_seen = [0]

    def on_signal(signum: int, frame: Any) -> None:
        signals_seen[0] += 1
        immediate = signals_seen[0] > 1
        logging.getLogger("popclient.worker").warning(
            "signal %s: %s", signum, "handing back now" if immediate else "draining"
        )
        worker.stop(immediate=immediate)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return worker.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
