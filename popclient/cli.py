"""``pop``: the POP command line (popclient/README.md). ``pop --help`` lists the commands.

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
import getpass
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from popclient import __version__
from popclient.client import PopClient
from popclient.errors import (
    Conflict,
    Forbidden,
    NotFound,
    PopError,
    Unauthorized,
    ValidationFailed,
)
from popclient.handlers import default_registry
from popclient.worker import Worker

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_VALIDATION = 5
EXIT_AUTH = 6

TERMINAL_STATES = frozenset({"succeeded", "failed", "aborted"})

ClientFactory = Callable[..., PopClient]


class UsageError(Exception):
    """Bad invocation discovered after parsing (exit 2)."""


# -- configuration ---------------------------------------------------------------------


def config_path() -> Path:
    explicit = os.environ.get("POP_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "pop" / "config.json"


def load_config() -> dict[str, Any]:
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def read_token_file(name: str) -> str:
    """The API token in a file (a mounted Secret, a 0600 file): its first line, trimmed."""
    try:
        text = Path(name).expanduser().read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the token file {name}: {exc}") from exc
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise UsageError(f"the token file {name} is empty")
    return token


def explicit_token(args: argparse.Namespace) -> str | None:
    """The token given for this run: ``--token-file``, ``POP_TOKEN``, ``POP_TOKEN_FILE``."""
    if getattr(args, "token", None):
        raise UsageError(
            "--token is not accepted: the command line is visible to every user (ps); "
            "set POP_TOKEN or use --token-file"
        )
    if getattr(args, "token_file", None):
        return read_token_file(args.token_file)
    if os.environ.get("POP_TOKEN"):
        return os.environ["POP_TOKEN"].strip()
    if os.environ.get("POP_TOKEN_FILE"):
        return read_token_file(os.environ["POP_TOKEN_FILE"])
    return None


def save_config(data: dict[str, Any]) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=2)
    os.replace(temporary, path)
    return path


# -- output ----------------------------------------------------------------------------


class Output:
    def __init__(self, stdout: TextIO, stderr: TextIO, as_json: bool) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.as_json = as_json

    def json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, default=str) + "\n")

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")

    def error(self, text: str) -> None:
        self.stderr.write(f"pop: {text}\n")

    def table(self, rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> None:
        cells = [[_cell(value) for value in row] for row in rows]
        widths = [len(header) for header in headers]
        for row in cells:
            for index, value in enumerate(row):
                widths[index] = max(widths[index], len(value))
        self.line(
            "  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
        )
        for row in cells:
            self.line("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        if not rows:
            self.line("(none)")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _results(page: Any) -> list[dict[str, Any]]:
    if isinstance(page, dict):
        return list(page.get("results") or [])
    return list(page or [])


def agenda_state(agenda: dict[str, Any]) -> str:
    progress = agenda.get("progress") or {}
    return str(agenda.get("state") or progress.get("state") or "?")


def agenda_percent(agenda: dict[str, Any]) -> float:
    progress = agenda.get("progress") or {}
    value = agenda.get("percent_complete", progress.get("percent_complete"))
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def agenda_operations(agenda: dict[str, Any]) -> list[dict[str, Any]]:
    progress = agenda.get("progress") or {}
    operations = progress.get("operations")
    if operations is None:
        operations = agenda.get("operation_progress") or []
    return list(operations)


def progress_bar(percent: float, width: int = 24) -> str:
    filled = int(round(max(0.0, min(100.0, percent)) / 100 * width))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


# -- argument parsing ------------------------------------------------------------------


def _json_argument(text: str) -> Any:
    """A JSON value from ``text``, ``@file`` or ``-`` (stdin)."""
    if text == "-":
        source = sys.stdin.read()
    elif text.startswith("@"):
        try:
            source = Path(text[1:]).read_text()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {text[1:]}: {exc}") from exc
    else:
        source = text
    try:
        return json.loads(source)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc


def _common_options(suppress: bool) -> argparse.ArgumentParser:
    """Options accepted both before and after the command (``pop --json agendas list``)."""
    default = argparse.SUPPRESS if suppress else None
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--url", default=default, help="server URL (env POP_URL)")
    parser.add_argument(
        "--token-file", default=default, metavar="FILE",
        help="file holding the API token (env POP_TOKEN, POP_TOKEN_FILE)",
    )  # fmt: skip
    # Refused with a clear message (see explicit_token): a token in argv leaks through ps.
    parser.add_argument("--token", default=default, help=argparse.SUPPRESS)
    parser.add_argument("--cid", default=default, help="correlation id sent as X-POP-CID")
    parser.add_argument(
        "--timeout", type=float, default=argparse.SUPPRESS if suppress else 30.0,
        help="HTTP timeout in seconds (30)",
    )  # fmt: skip
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
        help="print JSON for scripts instead of tables",
    )  # fmt: skip
    parser.add_argument(
        "-v", "--verbose", action="count", default=argparse.SUPPRESS if suppress else 0,
        help="more logging (repeat for debug)",
    )  # fmt: skip
    return parser


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

    def command(parent: Any, name: str, help_text: str) -> argparse.ArgumentParser:
        return parent.add_parser(name, help=help_text, description=help_text, parents=[common])

    login = command(commands, "login", "get an API token and save it to the config file")
    login.add_argument("--username", "-u")
    login.add_argument("--password", help="(prompted when omitted)")
    login.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    login.add_argument("--name", help="name of the new token (pop-cli@HOST)")
    login.set_defaults(handler=cmd_login)

    # agendas
    agendas = commands.add_parser("agendas", help="submit, list, watch and control agendas")
    agenda_commands = agendas.add_subparsers(dest="subcommand", metavar="ACTION", required=True)

    submit = command(agenda_commands, "submit", "submit an agenda from a JSON file (- for stdin)")
    submit.add_argument("file", help="agenda JSON ({operations: [...]}, or a list of operations)")
    submit.add_argument("--bulk", action="store_true", help="the file holds a list of agendas")
    submit.add_argument("--link-id")
    submit.add_argument("--external-id")
    submit.add_argument("--priority", type=int, choices=range(10), metavar="0-9")
    submit.add_argument("--max-attempts", type=int)
    submit.add_argument("--retry-delay", type=int, dest="retry_delay_seconds")
    submit.add_argument("--insight", dest="default_insight", help="preferred insight (name or id)")
    submit.add_argument("--customer", help="needed when you belong to several customers")
    submit.add_argument("--callback-url")
    submit.add_argument("--run-after", help="ISO time before which it is not run")
    submit.add_argument("--do-not-run", action="store_true", help="create it but never queue it")
    submit.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument("--idempotency-key")
    submit.add_argument(
        "--wait", action="store_true", help="watch until it ends (exit 1 if failed)"
    )
    submit.set_defaults(handler=cmd_agendas_submit)

    listing = command(agenda_commands, "list", "list agendas")
    for option in ("state", "link-id", "customer", "insight", "template", "external-id"):
        dest = option.replace("-", "_")
        listing.add_argument(f"--{option}", dest=f"filter_{dest}", metavar=dest.upper())
    listing.add_argument("--by-cid", dest="filter_cid", metavar="CID", help="created with this cid")
    listing.add_argument("--created-after", dest="filter_created_after", metavar="TIME")
    listing.add_argument("--created-before", dest="filter_created_before", metavar="TIME")
    listing.add_argument("--ordering", dest="filter_ordering", metavar="FIELD", help="-created_at")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int)
    listing.add_argument("--all", action="store_true", help="follow every page")
    listing.set_defaults(handler=cmd_agendas_list)

    show = command(agenda_commands, "show", "show an agenda with its operations")
    show.add_argument("id")
    show.set_defaults(handler=cmd_agendas_show)

    watch = command(agenda_commands, "watch", "live progress until the agenda ends")
    watch.add_argument("id")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between polls (1)")
    watch.add_argument("--max-wait", type=float, help="give up (exit 1) after this many seconds")
    watch.set_defaults(handler=cmd_agendas_watch)

    for name, help_text in (
        ("abort", "abort an agenda (a running one is stopped by its worker)"),
        ("pause", "pause an agenda (a running one stops after its running operations)"),
        ("resume", "resume a paused agenda"),
    ):
        action = command(agenda_commands, name, help_text)
        action.add_argument("id")
        action.set_defaults(handler=cmd_agendas_action, action=name)

    rerun = command(agenda_commands, "rerun", "run a finished or paused agenda again")
    rerun.add_argument("id")
    rerun.add_argument("--mode", choices=["continue", "reset_all", "operations_to_reset"])
    rerun.add_argument("--operations", help="comma-separated operations to reset")
    rerun.add_argument("--skip-execution", action="store_true")
    rerun.add_argument("--wait", action="store_true")
    rerun.set_defaults(handler=cmd_agendas_rerun)

    executions = command(agenda_commands, "executions", "list an agenda's execution attempts")
    executions.add_argument("id")
    executions.set_defaults(handler=cmd_agendas_executions)

    # templates
    templates = commands.add_parser("templates", help="list, show, run and preview templates")
    template_commands = templates.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    template_list = command(template_commands, "list", "list templates you can use")
    template_list.add_argument("--limit", type=int, default=100)
    template_list.set_defaults(handler=cmd_templates_list)
    template_show = command(template_commands, "show", "show a template")
    template_show.add_argument("id")
    template_show.set_defaults(handler=cmd_templates_show)
    for name, help_text in (
        ("run", "run a template with a payload; prints the new agenda"),
        ("preview", "print the agenda a run would submit, without submitting"),
    ):
        run = command(template_commands, name, help_text)
        run.add_argument("id")
        run.add_argument(
            "--payload", type=_json_argument, default={}, help="JSON, @file or - (stdin)"
        )
        if name == "run":
            run.add_argument("--link-id")
            run.add_argument("--priority", type=int, choices=range(10), metavar="0-9")
            run.add_argument("--external-id")
            run.add_argument("--wait", action="store_true")
        run.set_defaults(handler=cmd_templates_run, preview=name == "preview")

    # schedules
    schedules = commands.add_parser("schedules", help="cron schedules of template runs")
    schedule_commands = schedules.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    schedule_list = command(schedule_commands, "list", "list schedules")
    schedule_list.add_argument("--limit", type=int, default=100)
    schedule_list.set_defaults(handler=cmd_schedules_list)
    create = command(schedule_commands, "create", "create a schedule")
    create.add_argument("--name", required=True)
    create.add_argument("--template", required=True, help="template id")
    create.add_argument("--cron", required=True, help='e.g. "*/5 * * * *"')
    create.add_argument("--timezone")
    create.add_argument("--payload", type=_json_argument, help="JSON, @file or - (stdin)")
    create.add_argument("--catch-up", choices=["skip", "once"])
    create.add_argument("--overlap", choices=["allow", "skip"])
    create.add_argument("--start-at")
    create.add_argument("--end-at")
    create.add_argument("--customer")
    create.add_argument("--link-id", help="link id of the agendas it creates")
    create.set_defaults(handler=cmd_schedules_create)
    for name, help_text in (
        ("pause", "pause a schedule"),
        ("resume", "resume a schedule"),
        ("trigger", "run a schedule now"),
        ("runs", "list the agendas a schedule created"),
    ):
        action = command(schedule_commands, name, help_text)
        action.add_argument("id")
        action.set_defaults(handler=cmd_schedules_action, action=name)

    # tokens
    tokens = commands.add_parser("tokens", help="list, create and revoke your API tokens")
    token_commands = tokens.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    token_list = command(token_commands, "list", "list your API tokens (staff: everyone's)")
    token_list.add_argument("--user", dest="filter_user", metavar="USER_ID", help="staff only")
    token_list.add_argument("--name", dest="filter_name", metavar="NAME")
    token_list.set_defaults(handler=cmd_tokens_list)
    token_create = command(token_commands, "create", "create an API token; its key is printed once")
    token_create.add_argument("name", help="what will use it: laptop, worker-farm-a")
    lifetime = token_create.add_mutually_exclusive_group()
    lifetime.add_argument("--expires-in-days", type=int, metavar="DAYS")
    lifetime.add_argument("--no-expiry", action="store_true", help="never expires")
    token_create.add_argument(
        "--output", metavar="FILE", help="write the key to FILE (mode 0600) instead of stdout"
    )
    token_create.set_defaults(handler=cmd_tokens_create)
    token_revoke = command(token_commands, "revoke", "revoke an API token")
    token_revoke.add_argument("id", help="token id (from 'pop tokens list')")
    token_revoke.set_defaults(handler=cmd_tokens_revoke)

    queues = command(commands, "queues", "queue depths per insight")
    queues.set_defaults(handler=cmd_queues)

    summary = command(commands, "progress", "progress summary of the agendas sharing a link id")
    summary.add_argument("link_id")
    summary.set_defaults(handler=cmd_progress)

    worker = command(commands, "worker", "pull and run agendas of one insight")
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
    return parser


# -- commands --------------------------------------------------------------------------


class Context:
    def __init__(
        self, args: argparse.Namespace, out: Output, client_factory: ClientFactory | None
    ) -> None:
        self.args = args
        self.out = out
        self._factory = client_factory
        self._client: PopClient | None = None

    def settings(self, *, need_token: bool = True) -> tuple[str, str | None]:
        config = load_config()
        url = self.args.url or os.environ.get("POP_URL") or config.get("url")
        token = explicit_token(self.args) or config.get("token")
        if not url:
            raise UsageError("no server URL: pass --url, set POP_URL or run 'pop login'")
        if need_token and not token:
            raise UsageError(
                "no API token: set POP_TOKEN, use --token-file/POP_TOKEN_FILE or run 'pop login'"
            )
        return url, token

    def client(self, *, need_token: bool = True) -> PopClient:
        if self._client is None:
            url, token = self.settings(need_token=need_token)
            factory = self._factory or PopClient
            self._client = factory(url, token, cid=self.args.cid, timeout=self.args.timeout)
        return self._client


def cmd_login(ctx: Context) -> int:
    args = ctx.args
    url, token = ctx.settings(need_token=False)
    username = args.username
    given = explicit_token(args)
    if given and not username:
        client = ctx.client()
        client.queues()  # proves the token works
        token_value = given
    else:
        if not username:
            username = input("Username: ")
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = args.password or getpass.getpass("Password: ")
        try:
            token_value = ctx.client(need_token=False).obtain_token(
                username, password, name=args.name or f"pop-cli@{socket.gethostname()}"
            )
        except ValidationFailed as exc:  # DRF answers bad credentials with 400
            raise Unauthorized(exc.message, status_code=exc.status_code, cid=exc.cid) from exc
    path = save_config({"url": url, "token": token_value, "username": username})
    if ctx.out.as_json:
        ctx.out.json({"url": url, "username": username, "config": str(path)})
    else:
        ctx.out.line(f"Logged in to {url}{f' as {username}' if username else ''}; saved to {path}")
    return EXIT_OK


def _load_json_file(name: str) -> Any:
    try:
        text = sys.stdin.read() if name == "-" else Path(name).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {name}: {exc}") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{name} is not valid JSON: {exc}") from exc


def _parse_params(items: list[str]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param needs KEY=VALUE, got {item!r}")
        try:
            params[key] = json.loads(value)
        except ValueError:
            params[key] = value
    return params


def cmd_agendas_submit(ctx: Context) -> int:
    args = ctx.args
    document = _load_json_file(args.file)
    overrides = {
        key: getattr(args, key)
        for key in (
            "link_id", "external_id", "priority", "max_attempts", "retry_delay_seconds",
            "default_insight", "customer", "callback_url", "run_after",
        )
        if getattr(args, key) is not None
    }  # fmt: skip
    if args.do_not_run:
        overrides["do_not_run"] = True
    params = _parse_params(args.param)
    client = ctx.client()
    if args.bulk:
        items = document.get("agendas") if isinstance(document, dict) else document
        if not isinstance(items, list):
            raise UsageError('--bulk needs a list of agendas (or {"agendas": [...]})')
        agendas = [_with_overrides(item, overrides, params) for item in items]
        results = client.submit_agendas_bulk(agendas)
        failed = [r for r in results if isinstance(r, dict) and "errors" in r]
        if ctx.out.as_json:
            ctx.out.json(results)
        else:
            rows = []
            for index, result in enumerate(results):
                if isinstance(result, dict) and "errors" in result:
                    rows.append([index, "-", "rejected", _cell(result["errors"])])
                else:
                    rows.append([index, result.get("id"), agenda_state(result), ""])
            ctx.out.table(rows, ["#", "id", "state", "errors"])
        return EXIT_VALIDATION if failed else EXIT_OK
    if isinstance(document, list):
        document = {"operations": document}
    if not isinstance(document, dict):
        raise UsageError("the agenda must be a JSON object or a list of operations")
    agenda = client.submit_agenda(
        _with_overrides(document, overrides, params), idempotency_key=args.idempotency_key
    )
    return _after_submit(ctx, agenda, wait=args.wait)


def _with_overrides(agenda: Any, overrides: dict[str, Any], params: dict[str, Any]) -> Any:
    if not isinstance(agenda, dict):
        return agenda
    merged = {**agenda, **overrides}
    if params:
        merged["params"] = {**(agenda.get("params") or {}), **params}
    return merged


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


def cmd_agendas_list(ctx: Context) -> int:
    args = ctx.args
    filters = {
        key[len("filter_") :]: value
        for key, value in vars(args).items()
        if key.startswith("filter_") and value is not None
    }
    client = ctx.client()
    if args.all:
        agendas = list(client.iter_agendas(limit=args.limit, **filters))
    else:
        agendas = _results(client.list_agendas(limit=args.limit, offset=args.offset, **filters))
    if ctx.out.as_json:
        ctx.out.json(agendas)
        return EXIT_OK
    rows = [
        [
            a.get("id"),
            agenda_state(a),
            f"{agenda_percent(a):.0f}%",
            a.get("priority"),
            a.get("link_id") or None,
            a.get("created_at"),
        ]
        for a in agendas
    ]
    ctx.out.table(rows, ["id", "state", "done", "priority", "link_id", "created_at"])
    return EXIT_OK


def cmd_agendas_show(ctx: Context) -> int:
    agenda = ctx.client().get_agenda(ctx.args.id)
    if ctx.out.as_json:
        ctx.out.json(agenda)
        return EXIT_OK
    progress = agenda.get("progress") or {}
    out = ctx.out
    out.line(f"Agenda     {agenda.get('id')}")
    out.line(f"State      {agenda_state(agenda)}  {progress_bar(agenda_percent(agenda))} "
             f"{agenda_percent(agenda):.0f}%")  # fmt: skip
    for label, value in (
        ("Message", progress.get("message")),
        ("Link id", agenda.get("link_id")),
        ("Priority", agenda.get("priority")),
        ("Attempts", progress.get("attempts_completed")),
        ("Insight", agenda.get("insight_name") or agenda.get("insight")),
        ("Created", agenda.get("created_at")),
        ("CID", agenda.get("cid")),
    ):
        if value not in (None, ""):
            out.line(f"{label:<10} {value}")
    types = {op.get("name"): op.get("type") for op in agenda.get("operations") or []}
    rows = []
    for op in agenda_operations(agenda):
        outcome = op.get("result") if op.get("state") == "succeeded" else op.get("message")
        rows.append(
            [
                op.get("name"),
                op.get("type") or types.get(op.get("name")),
                op.get("state"),
                f"{float(op.get('percent_complete') or 0):.0f}%",
                outcome,
            ]
        )
    if rows:
        out.line()
        out.table(rows, ["operation", "type", "state", "done", "result / message"])
    for entry in progress.get("diagnostics") or []:
        out.line(f"! {entry.get('time', '')} {entry.get('message', '')}")
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


def cmd_agendas_watch(ctx: Context) -> int:
    return _watch(ctx, ctx.args.id, interval=ctx.args.interval, max_wait=ctx.args.max_wait)


def cmd_agendas_action(ctx: Context) -> int:
    client = ctx.client()
    action = {
        "abort": client.abort_agenda,
        "pause": client.pause_agenda,
        "resume": client.resume_agenda,
    }[ctx.args.action]
    agenda = action(ctx.args.id) or {}
    if ctx.out.as_json:
        ctx.out.json(agenda)
    else:
        state = agenda_state(agenda) if agenda else "?"
        ctx.out.line(f"Agenda {ctx.args.id}: {ctx.args.action} accepted (state {state})")
    return EXIT_OK


def cmd_agendas_rerun(ctx: Context) -> int:
    args = ctx.args
    operations = [name.strip() for name in (args.operations or "").split(",") if name.strip()]
    mode = args.mode or ("operations_to_reset" if operations else "continue")
    if mode == "operations_to_reset" and not operations:
        raise UsageError("--mode operations_to_reset needs --operations")
    agenda = ctx.client().rerun_agenda(
        args.id,
        mode=mode,
        operations=operations or None,
        skip_execution=True if args.skip_execution else None,
    )
    if args.wait:
        if not ctx.out.as_json:
            ctx.out.line(f"Rerunning agenda {args.id} ({mode})")
        return _watch(ctx, args.id, interval=1.0, max_wait=None)
    if ctx.out.as_json:
        ctx.out.json(agenda)
    else:
        state = agenda_state(agenda) if isinstance(agenda, dict) and agenda else "?"
        ctx.out.line(f"Agenda {args.id}: rerun ({mode}) accepted (state {state})")
    return EXIT_OK


def cmd_agendas_executions(ctx: Context) -> int:
    executions = _results(ctx.client().list_executions(ctx.args.id))
    if ctx.out.as_json:
        ctx.out.json(executions)
        return EXIT_OK
    rows = [
        [e.get("number"), e.get("worker"), e.get("outcome") or "running", e.get("started_at"),
         e.get("ended_at")]
        for e in executions
    ]  # fmt: skip
    ctx.out.table(rows, ["#", "worker", "outcome", "started_at", "ended_at"])
    return EXIT_OK


def cmd_templates_list(ctx: Context) -> int:
    templates = _results(ctx.client().list_templates(limit=ctx.args.limit))
    if ctx.out.as_json:
        ctx.out.json(templates)
        return EXIT_OK
    rows = [[t.get("id"), t.get("name"), t.get("description")] for t in templates]
    ctx.out.table(rows, ["id", "name", "description"])
    return EXIT_OK


def cmd_templates_show(ctx: Context) -> int:
    template = ctx.client().get_template(ctx.args.id)
    if ctx.out.as_json:
        ctx.out.json(template)
        return EXIT_OK
    ctx.out.line(f"Template   {template.get('id')}  {template.get('name', '')}")
    if template.get("description"):
        ctx.out.line(f"           {template['description']}")
    for key in ("static_parameters", "payload_schema", "agenda"):
        if template.get(key) is not None:
            ctx.out.line(f"{key}:")
            ctx.out.line(json.dumps(template[key], indent=2))
    return EXIT_OK


def cmd_templates_run(ctx: Context) -> int:
    args = ctx.args
    fields = {
        key: getattr(args, key, None)
        for key in ("link_id", "priority", "external_id")
        if getattr(args, key, None) is not None
    }
    client = ctx.client()
    if args.preview:
        preview = client.preview_template(args.id, args.payload)
        errors = preview.get("errors") if isinstance(preview, dict) else None
        if ctx.out.as_json:
            ctx.out.json(preview)
        else:
            body = preview.get("agenda", preview) if isinstance(preview, dict) else preview
            ctx.out.line(json.dumps(body, indent=2))
        if errors:
            ctx.out.error("the expanded agenda would be rejected:")
            for field, messages in errors.items():
                for text in messages if isinstance(messages, list) else [messages]:
                    ctx.out.error(f"  {field}: {_cell(text)}")
            return EXIT_VALIDATION
        return EXIT_OK
    agenda = client.run_template(args.id, args.payload, **fields)
    return _after_submit(ctx, agenda, wait=args.wait)


def cmd_schedules_list(ctx: Context) -> int:
    schedules = _results(ctx.client().list_schedules(limit=ctx.args.limit))
    if ctx.out.as_json:
        ctx.out.json(schedules)
        return EXIT_OK
    rows = [
        [s.get("id"), s.get("name"), s.get("cron"), s.get("timezone"), s.get("state"),
         s.get("next_run_at"), s.get("last_run_at")]
        for s in schedules
    ]  # fmt: skip
    ctx.out.table(rows, ["id", "name", "cron", "timezone", "state", "next_run_at", "last_run_at"])
    return EXIT_OK


def cmd_schedules_create(ctx: Context) -> int:
    args = ctx.args
    schedule = ctx.client().create_schedule(
        name=args.name,
        template=args.template,
        cron=args.cron,
        timezone=args.timezone,
        payload=args.payload,
        catch_up=args.catch_up,
        overlap=args.overlap,
        start_at=args.start_at,
        end_at=args.end_at,
        customer=args.customer,
        link_id=args.link_id,
    )
    if ctx.out.as_json:
        ctx.out.json(schedule)
    else:
        ctx.out.line(
            f"Created schedule {schedule.get('id')} ({schedule.get('cron')}, "
            f"next run {schedule.get('next_run_at')})"
        )
    return EXIT_OK


def cmd_schedules_action(ctx: Context) -> int:
    client = ctx.client()
    action = ctx.args.action
    if action == "runs":
        runs = _results(client.schedule_runs(ctx.args.id))
        if ctx.out.as_json:
            ctx.out.json(runs)
        else:
            rows = [[a.get("id"), agenda_state(a), a.get("created_at")] for a in runs]
            ctx.out.table(rows, ["agenda", "state", "created_at"])
        return EXIT_OK
    call = {
        "pause": client.pause_schedule,
        "resume": client.resume_schedule,
        "trigger": client.trigger_schedule,
    }[action]
    result = call(ctx.args.id) or {}
    if ctx.out.as_json:
        ctx.out.json(result)
    elif action == "trigger" and result.get("id") and "cron" not in result:
        ctx.out.line(f"Schedule {ctx.args.id} triggered: agenda {result.get('id')}")
    else:
        ctx.out.line(
            f"Schedule {ctx.args.id}: {action} accepted (state {result.get('state', '?')})"
        )
    return EXIT_OK


def cmd_queues(ctx: Context) -> int:
    queues = _results(ctx.client().queues())
    if ctx.out.as_json:
        ctx.out.json(queues)
        return EXIT_OK
    rows = []
    for q in queues:
        name = q.get("insight_name") or q.get("name") or q.get("insight")
        oldest = q.get("oldest_ready_age_seconds", q.get("oldest_ready_age"))
        rows.append(
            [name, f"{q.get('queued', 0)}/{q.get('queue_size', '?')}", q.get("ready"),
             q.get("executing"), f"{float(oldest):.0f}s" if oldest is not None else None]
        )  # fmt: skip
    ctx.out.table(rows, ["insight", "queued", "ready", "executing", "oldest ready"])
    return EXIT_OK


def cmd_tokens_list(ctx: Context) -> int:
    filters = {
        key.removeprefix("filter_"): value
        for key, value in vars(ctx.args).items()
        if key.startswith("filter_") and value is not None
    }
    tokens = list(ctx.client().iter_tokens(**filters))
    if ctx.out.as_json:
        ctx.out.json(tokens)
        return EXIT_OK
    rows = [
        [t.get("id"), t.get("name"), t.get("username"), t.get("created"),
         t.get("expiry") or "never", t.get("last_used_at") or "never"]
        for t in tokens
    ]  # fmt: skip
    ctx.out.table(rows, ["id", "name", "user", "created", "expires", "last used"])
    return EXIT_OK


def write_secret_file(name: str, text: str) -> Path:
    """Write `text` to a new or truncated file only its owner may read (0600)."""
    path = Path(name).expanduser()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")
    os.chmod(path, 0o600)
    return path


def cmd_tokens_create(ctx: Context) -> int:
    args = ctx.args
    created = ctx.client().create_token(
        args.name, expires_in_days=args.expires_in_days, never_expires=args.no_expiry
    )
    key = created.pop("token")
    if args.output:
        write_secret_file(args.output, key)
    elif not ctx.out.as_json:
        ctx.out.line(key)
    if ctx.out.as_json:
        ctx.out.json(created if args.output else {"token": key, **created})
        return EXIT_OK
    expiry = created.get("expiry") or "never"
    where = f"written to {args.output}" if args.output else "shown above"
    ctx.out.error(
        f"Created token {created.get('name')!r} (id {created.get('id')}, expires {expiry}); "
        f"its key is {where} and cannot be shown again."
    )
    return EXIT_OK


def cmd_tokens_revoke(ctx: Context) -> int:
    ctx.client().delete_token(ctx.args.id)
    if ctx.out.as_json:
        ctx.out.json({"revoked": ctx.args.id})
    else:
        ctx.out.line(f"Revoked token {ctx.args.id}")
    return EXIT_OK


def cmd_progress(ctx: Context) -> int:
    summary = ctx.client().progress_summary(ctx.args.link_id)
    if ctx.out.as_json:
        ctx.out.json(summary)
        return EXIT_OK
    percent = float(summary.get("percent_complete") or 0)
    ctx.out.line(
        f"{summary.get('link_id')}: {summary.get('processing_state')} "
        f"{progress_bar(percent)} {percent:.0f}%"
    )
    counts = summary.get("counts") or {}
    if counts:
        ctx.out.line(", ".join(f"{n} {state}" for state, n in sorted(counts.items())))
    return EXIT_OK


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


# -- entry point -----------------------------------------------------------------------


def _exit_code(error: PopError) -> int:
    if isinstance(error, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, Conflict):
        return EXIT_CONFLICT
    if isinstance(error, ValidationFailed):
        return EXIT_VALIDATION
    if isinstance(error, Unauthorized | Forbidden):
        return EXIT_AUTH
    return EXIT_FAILURE


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
    if args.command == "worker":
        level = min(level, logging.INFO)
    logging.basicConfig(
        level=level, stream=stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.verbose < 2:  # one INFO line per HTTP request drowns the worker's own log
        logging.getLogger("httpx").setLevel(logging.WARNING)
    ctx = Context(args, out, client_factory)
    try:
        return args.handler(ctx)
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
