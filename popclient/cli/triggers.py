"""``pop triggers``: list, show and create inbound triggers, rotate a secret, fire one with a
signed event (popclient/triggers.py), and list a trigger's firings.

A trigger's secret is printed once, by ``create`` and ``rotate-secret`` (or written to a 0600
file with ``--secret-output``). ``fire`` reads it from ``--secret-file`` or
``POP_TRIGGER_SECRET``, never from the command line, where every user could read it (``ps``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from popclient.cli.base import (
    EXIT_AUTH,
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_VALIDATION,
    Context,
    UsageError,
    _cell,
    _json_argument,
    _results,
    add_command,
    template_id,
)
from popclient.cli.tokens import write_secret_file
from popclient.triggers import fire

SECRET_ENV = "POP_TRIGGER_SECRET"
FIRINGS_SHOWN = 10
SHOWN_FIELDS = (
    "id",
    "name",
    "customer",
    "template",
    "template_version",
    "enabled",
    "payload_mapping",
    "filter",
    "labels",
    "event_id_pointer",
    "fire_url",
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``triggers`` and its actions."""
    triggers = commands.add_parser(
        "triggers", help="inbound triggers: signed events run a template"
    )
    actions = triggers.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    listing = add_command(actions, common, "list", "list triggers")
    listing.add_argument("--limit", type=int, default=100)
    listing.set_defaults(handler=cmd_triggers_list)
    show = add_command(actions, common, "show", "show a trigger and its latest firings")
    show.add_argument("id")
    show.set_defaults(handler=cmd_triggers_show)
    create = add_command(actions, common, "create", "create a trigger; its secret is printed once")
    create.add_argument("--name", required=True)
    create.add_argument("--template", required=True, help="template id or name")
    create.add_argument(
        "--mapping", type=_json_argument, help='payload mapping: JSON, @file or -, e.g. '
        '\'{"path": "@</Records/0/s3/object/key>"}\'',
    )  # fmt: skip
    create.add_argument(
        "--filter", type=_json_argument,
        help='JSON list: [{"pointer": "/a", "equals": "x"} | {"pointer": "/a", "prefix": "x"}]',
    )  # fmt: skip
    create.add_argument("--labels", type=_json_argument, help='JSON object: {"source": "s3"}')
    create.add_argument("--event-id-pointer", help="JSON pointer to the event's id (dedup)")
    create.add_argument("--template-version", type=int, metavar="N", help="default: latest")
    create.add_argument("--customer", help="customer id or slug (if you administer several)")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    create.add_argument(
        "--secret-output", metavar="FILE", help="write the secret to FILE (mode 0600)"
    )
    create.set_defaults(handler=cmd_triggers_create)
    rotate = add_command(actions, common, "rotate-secret", "give a trigger a new secret")
    rotate.add_argument("id")
    rotate.add_argument("--secret-output", metavar="FILE", help="write it to FILE (mode 0600)")
    rotate.set_defaults(handler=cmd_triggers_rotate)
    fire_command = add_command(actions, common, "fire", "fire a trigger with a signed event")
    fire_command.add_argument("id")
    fire_command.add_argument(
        "--event", type=_json_argument, required=True, help="the event: JSON, @file or -"
    )
    fire_command.add_argument(
        "--secret-file", metavar="FILE", help=f"file holding the secret (env {SECRET_ENV})"
    )
    fire_command.add_argument("--idempotency-key", metavar="KEY")
    fire_command.set_defaults(handler=cmd_triggers_fire)
    firings = add_command(actions, common, "firings", "list a trigger's firings, newest first")
    firings.add_argument("id")
    firings.add_argument("--limit", type=int, default=100)
    firings.set_defaults(handler=cmd_triggers_firings)


def cmd_triggers_list(ctx: Context) -> int:
    rows = _results(ctx.client().request("GET", "triggers/", params={"limit": ctx.args.limit}))
    if ctx.out.as_json:
        ctx.out.json(rows)
        return EXIT_OK
    ctx.out.table(
        [
            [t.get("id"), t.get("name"), t.get("template"), t.get("template_version") or "latest",
             "yes" if t.get("enabled") else "no", t.get("event_id_pointer") or ""]
            for t in rows
        ],
        ["id", "name", "template", "version", "enabled", "event id"],
    )  # fmt: skip
    return EXIT_OK


def cmd_triggers_show(ctx: Context) -> int:
    client = ctx.client()
    trigger = client.request("GET", f"triggers/{ctx.args.id}/")
    firings = _results(
        client.request("GET", f"triggers/{ctx.args.id}/firings/", params={"limit": FIRINGS_SHOWN})
    )
    if ctx.out.as_json:
        ctx.out.json({**trigger, "firings": firings})
        return EXIT_OK
    for name in SHOWN_FIELDS:
        ctx.out.line(f"{name + ':':18} {_cell(trigger.get(name))}")
    ctx.out.line()
    _firings_table(ctx, firings)
    return EXIT_OK


def _firings_table(ctx: Context, firings: list[dict[str, Any]]) -> None:
    ctx.out.table(
        [[f.get("received_at"), f.get("status"), f.get("agenda") or "", f.get("reason") or "",
          f.get("idempotency_key") or f.get("event_id") or ""] for f in firings],
        ["received", "status", "agenda", "reason", "key / event id"],
    )  # fmt: skip


def _given(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _secret_shown(ctx: Context, answer: dict[str, Any], output: str | None, what: str) -> int:
    secret = answer.pop("secret", None)
    if output and secret:
        write_secret_file(output, secret)
    elif secret and not ctx.out.as_json:
        ctx.out.line(secret)
    if ctx.out.as_json:
        ctx.out.json(answer if output else {"secret": secret, **answer})
        return EXIT_OK
    where = f"written to {output}" if output else "shown above"
    ctx.out.error(
        f"{what} trigger {answer.get('name')!r} (id {answer.get('id')}); its secret is {where} "
        f"and cannot be shown again. Events go to {answer.get('fire_url')}"
    )
    return EXIT_OK


def cmd_triggers_create(ctx: Context) -> int:
    args = ctx.args
    body = _given(
        {
            "name": args.name,
            "template": template_id(ctx, args.template),
            "payload_mapping": args.mapping,
            "filter": args.filter,
            "labels": args.labels,
            "event_id_pointer": args.event_id_pointer,
            "template_version": args.template_version,
            "customer": args.customer,
            "enabled": False if args.disabled else None,
        }
    )
    created = ctx.client().request("POST", "triggers/", json=body)
    return _secret_shown(ctx, created, args.secret_output, "Created")


def cmd_triggers_rotate(ctx: Context) -> int:
    rotated = ctx.client().request("POST", f"triggers/{ctx.args.id}/rotate-secret/", json={})
    return _secret_shown(ctx, rotated, ctx.args.secret_output, "New secret for")


def _secret(args: argparse.Namespace) -> str:
    if args.secret_file:
        try:
            secret = Path(args.secret_file).expanduser().read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read {args.secret_file}: {exc}") from exc
    else:
        secret = os.environ.get(SECRET_ENV, "").strip()
    if not secret:
        raise UsageError(f"no trigger secret: use --secret-file or set {SECRET_ENV}")
    return secret


FIRE_EXIT = {400: EXIT_VALIDATION, 413: EXIT_VALIDATION, 401: EXIT_AUTH, 404: EXIT_NOT_FOUND}


def cmd_triggers_fire(ctx: Context) -> int:
    args = ctx.args
    if not isinstance(args.event, dict):
        raise UsageError("--event must be a JSON object")
    url, _ = ctx.settings(need_token=False)
    code, answer = fire(
        url,
        args.id,
        _secret(args),
        args.event,
        idempotency_key=args.idempotency_key,
        timeout=args.timeout,
    )
    if ctx.out.as_json:
        ctx.out.json({"http_status": code, **answer})
    elif code in (200, 201):
        status = answer.get("status")
        detail = answer.get("agenda") if status != "skipped" else answer.get("reason")
        ctx.out.line(f"{status}: firing {answer.get('firing')}, {detail or 'no agenda'}")
    else:
        ctx.out.error(f"fire refused ({code}): {answer.get('detail') or ''}".rstrip())
        for field, messages in answer.items():
            if field != "detail":
                ctx.out.error(f"  {field}: {_cell(messages)}")
    if code in (200, 201):
        return EXIT_OK
    return FIRE_EXIT.get(code, EXIT_FAILURE)


def cmd_triggers_firings(ctx: Context) -> int:
    path = f"triggers/{ctx.args.id}/firings/"
    firings = _results(ctx.client().request("GET", path, params={"limit": ctx.args.limit}))
    if ctx.out.as_json:
        ctx.out.json(firings)
    else:
        _firings_table(ctx, firings)
    return EXIT_OK
