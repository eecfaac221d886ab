"""What every ``pop`` command shares: exit codes, the configuration and token files, output
(tables or JSON), the options accepted by every command and the per-run :class:`Context`."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from popclient.client import PopClient
from popclient.errors import (
    Conflict,
    Forbidden,
    NotFound,
    PopError,
    Unauthorized,
    ValidationFailed,
)

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_VALIDATION = 5
EXIT_AUTH = 6

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


def add_command(
    parent: Any, common: argparse.ArgumentParser, name: str, help_text: str
) -> argparse.ArgumentParser:
    """A command under ``parent`` that takes the ``common`` options; its help is its description."""
    return parent.add_parser(name, help=help_text, description=help_text, parents=[common])


# -- running a command -----------------------------------------------------------------


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


# -- what the user typed for an agenda or a template ------------------------------------

FULL_ID = re.compile(r"^[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")
ID_PREFIX = re.compile(r"^[0-9a-fA-F-]{4,35}$")
CANDIDATES_SHOWN = 10


def _one_of(kind: str, typed: str, rows: list[dict[str, Any]], describe: Any) -> str:
    if len(rows) == 1:
        return str(rows[0]["id"])
    if not rows:
        raise NotFound(f"No {kind} you can see matches {typed!r} (looked up as an id prefix).")
    listed = "\n".join(f"  {describe(row)}" for row in rows[:CANDIDATES_SHOWN])
    more = "\n  …" if len(rows) > CANDIDATES_SHOWN else ""
    raise UsageError(f"{typed!r} matches several {kind}s; give more of the id:\n{listed}{more}")


def agenda_id(ctx: Context, typed: str) -> str:
    """A full agenda id, from a full id or a unique prefix of one (as the pages show ids);
    anything else is passed on as it is."""
    if FULL_ID.match(typed) or not ID_PREFIX.match(typed):
        return typed
    rows = _results(ctx.client().list_agendas(id_prefix=typed, limit=CANDIDATES_SHOWN + 1))
    return _one_of(
        "agenda",
        typed,
        rows,
        lambda row: f"{row['id']}  {agenda_state(row)}  {row.get('link_id') or ''}".rstrip(),
    )


def template_id(ctx: Context, typed: str) -> str:
    """A full template id, from a full id, a template name or a unique id prefix."""
    if FULL_ID.match(typed):
        return typed
    client = ctx.client()
    try:
        rows = _results(client.list_templates(name=typed, limit=CANDIDATES_SHOWN + 1))
        if not rows and ID_PREFIX.match(typed):
            rows = _results(client.list_templates(id_prefix=typed, limit=CANDIDATES_SHOWN + 1))
    except NotFound:
        rows = []
    if not rows:
        return typed  # the server says what it did not find
    return _one_of(
        "template",
        typed,
        rows,
        lambda row: f"{row['id']}  {row.get('name')}  (customer {row.get('customer')})",
    )
