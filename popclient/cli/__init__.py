"""``pop``: the POP command line (popclient/README.md). ``pop --help`` lists the commands.

This module builds the parser and runs a command; each command group lives in its own module
beside the options it registers, and :mod:`popclient.cli.base` holds what they share.

Configuration, first match wins: the server from ``--url``, ``POP_URL``; the API token from
``--token-file``, ``POP_TOKEN``, ``POP_TOKEN_FILE``; then the file written by ``pop login``
(``$POP_CONFIG`` or ``~/.config/pop/config.json``). A token is never taken from the command
line, where every user of the machine could read it (``ps``).

Exit codes (scripts can trust them):

====  ==========================================================
0     success (``watch``/``--wait``: the agenda succeeded)
1     failure: the agenda failed or was aborted, a server or network error
2     usage error (bad arguments, no URL or token configured)
3     not found (404)
4     conflict: not allowed in the current state (409)
5     validation error (400/413): field errors are printed
6     authentication or permission error (401/403)
====  ==========================================================
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from popclient import __version__
from popclient.cli import (
    agendas,
    login,
    progress,
    queues,
    schedules,
    templates,
    tokens,
    triggers,
    watching,
    worker,
)
from popclient.cli.base import (
    EXIT_OK,
    EXIT_USAGE,
    ClientFactory,
    Context,
    Output,
    UsageError,
    _cell,
    _common_options,
    _exit_code,
)
from popclient.errors import PopError, ValidationFailed

__all__ = ["build_parser", "entry_point", "main"]

# In the order ``pop --help`` lists them.
COMMAND_GROUPS = (
    login,
    agendas,
    templates,
    schedules,
    triggers,
    tokens,
    queues,
    progress,
    watching,
    worker,
)


def build_parser() -> argparse.ArgumentParser:
    common = _common_options(suppress=True)
    parser = argparse.ArgumentParser(
        prog="pop",
        description="POP command line: submit and watch agendas, run templates, run a worker.",
        epilog="Exit codes: 0 ok, 1 failure/agenda failed, 2 usage, 3 not found, "
        "4 conflict, 5 validation error, 6 auth.",
        parents=[_common_options(suppress=False)],
    )
    parser.add_argument("--version", action="version", version=f"pop {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in COMMAND_GROUPS:
        group.register(commands, common)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    client_factory: ClientFactory | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run ``pop``; returns the exit code (the console script exits with it)."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    out = Output(stdout, stderr, bool(args.json))
    level = logging.WARNING - 10 * min(2, args.verbose)
    if args.command == "worker" or getattr(args, "directory", None):  # long-running: say what
        level = min(level, logging.INFO)
    logging.basicConfig(
        level=level, stream=stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.verbose < 2:  # one INFO line per HTTP request drowns the worker's own log
        logging.getLogger("httpx").setLevel(logging.WARNING)
    ctx = Context(args, out, client_factory)
    try:
        return args.handler(ctx)
    except BrokenPipeError:  # `pop … | head`: the reader has what it wanted
        # A real file gets /dev/null so the flush at exit cannot fail again; a StringIO has none.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
        return EXIT_OK
    except UsageError as exc:
        out.error(str(exc))
        return EXIT_USAGE
    except PopError as exc:
        code = _exit_code(exc)
        out.error(str(exc))
        if isinstance(exc, ValidationFailed):
            for field, messages in exc.errors.items():
                texts = messages if isinstance(messages, list) else [messages]
                for text in texts:
                    out.error(f"  {field}: {_cell(text)}")
        if out.as_json:
            out.json(
                {
                    "error": exc.message,
                    "status": exc.status_code,
                    "errors": getattr(exc, "errors", None),
                    "cid": exc.cid,
                    "exit_code": code,
                }
            )
        return code
    except KeyboardInterrupt:
        out.error("interrupted")
        return 130
    finally:
        if ctx._client is not None and client_factory is None:
            ctx._client.close()


def entry_point() -> None:
    sys.exit(main())
