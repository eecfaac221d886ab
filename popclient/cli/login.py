"""``pop login``: get an API token (or check a given one) and save it to the config file."""

from __future__ import annotations

import argparse
import getpass
import socket
import sys
from typing import Any

from popclient.cli.base import EXIT_OK, Context, add_command, explicit_token, save_config
from popclient.errors import Unauthorized, ValidationFailed


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``login``."""
    login = add_command(
        commands, common, "login", "get an API token and save it to the config file"
    )
    login.add_argument("--username", "-u")
    login.add_argument("--password", help="(prompted when omitted)")
    login.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    login.add_argument("--name", help="name of the new token (pop-cli@HOST)")
    login.set_defaults(handler=cmd_login)


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
