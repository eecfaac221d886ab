"""``pop tokens``: list, create and revoke API tokens."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from popclient.cli.base import EXIT_OK, Context, add_command


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``tokens`` and its actions."""
    tokens = commands.add_parser("tokens", help="list, create and revoke your API tokens")
    token_commands = tokens.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    token_list = add_command(
        token_commands, common, "list", "list your API tokens (staff: everyone's)"
    )
    token_list.add_argument("--user", dest="filter_user", metavar="USER_ID", help="staff only")
    token_list.add_argument("--name", dest="filter_name", metavar="NAME")
    token_list.set_defaults(handler=cmd_tokens_list)
    token_create = add_command(
        token_commands, common, "create", "create an API token; its key is printed once"
    )
    token_create.add_argument("name", help="what will use it: laptop, worker-farm-a")
    lifetime = token_create.add_mutually_exclusive_group()
    lifetime.add_argument("--expires-in-days", type=int, metavar="DAYS")
    lifetime.add_argument("--no-expiry", action="store_true", help="never expires")
    token_create.add_argument(
        "--output", metavar="FILE", help="write the key to FILE (mode 0600) instead of stdout"
    )
    token_create.set_defaults(handler=cmd_tokens_create)
    token_revoke = add_command(token_commands, common, "revoke", "revoke an API token")
    token_revoke.add_argument("id", help="token id (from 'pop tokens list')")
    token_revoke.set_defaults(handler=cmd_tokens_revoke)


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
