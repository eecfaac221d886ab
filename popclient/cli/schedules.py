"""``pop schedules``: list and create cron schedules of template runs, pin one to a template
version (or let it follow the latest), pause, resume or trigger one, and list the agendas it
created."""

from __future__ import annotations

import argparse
from typing import Any

from popclient.cli.base import (
    EXIT_OK,
    Context,
    _json_argument,
    _results,
    add_command,
    agenda_state,
)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``schedules`` and its actions."""
    schedules = commands.add_parser("schedules", help="cron schedules of template runs")
    schedule_commands = schedules.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    schedule_list = add_command(schedule_commands, common, "list", "list schedules")
    schedule_list.add_argument("--limit", type=int, default=100)
    schedule_list.set_defaults(handler=cmd_schedules_list)
    create = add_command(schedule_commands, common, "create", "create a schedule")
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
    create.add_argument(
        "--template-version",
        type=_pinned_version,
        metavar="N|latest",
        help="run this template version every time (default: latest, following each edit)",
    )
    create.set_defaults(handler=cmd_schedules_create)
    pin = add_command(
        schedule_commands, common, "pin", "pin a schedule to a template version, or to latest"
    )
    pin.add_argument("id")
    pin.add_argument("template_version", metavar="N|latest", type=_pinned_version)
    pin.set_defaults(handler=cmd_schedules_pin)
    for name, help_text in (
        ("pause", "pause a schedule"),
        ("resume", "resume a schedule"),
        ("trigger", "run a schedule now"),
        ("runs", "list the agendas a schedule created"),
    ):
        action = add_command(schedule_commands, common, name, help_text)
        action.add_argument("id")
        action.set_defaults(handler=cmd_schedules_action, action=name)


def _pinned_version(text: str) -> int | None:
    """A version number, or ``latest`` (None: follow the template's latest version)."""
    if text == "latest":
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a version number or 'latest': {text!r}")
    return int(text)


def cmd_schedules_list(ctx: Context) -> int:
    schedules = _results(ctx.client().list_schedules(limit=ctx.args.limit))
    if ctx.out.as_json:
        ctx.out.json(schedules)
        return EXIT_OK
    rows = [
        [s.get("id"), s.get("name"), s.get("cron"), s.get("timezone"), s.get("state"),
         s.get("template_version") or "latest", s.get("next_run_at"), s.get("last_run_at")]
        for s in schedules
    ]  # fmt: skip
    ctx.out.table(
        rows,
        ["id", "name", "cron", "timezone", "state", "version", "next_run_at", "last_run_at"],
    )
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
        template_version=args.template_version,
    )
    if ctx.out.as_json:
        ctx.out.json(schedule)
    else:
        ctx.out.line(
            f"Created schedule {schedule.get('id')} ({schedule.get('cron')}, "
            f"next run {schedule.get('next_run_at')})"
        )
    return EXIT_OK


def cmd_schedules_pin(ctx: Context) -> int:
    args = ctx.args
    schedule = ctx.client().update_schedule(args.id, template_version=args.template_version)
    if ctx.out.as_json:
        ctx.out.json(schedule)
    else:
        pinned = schedule.get("template_version")
        runs = f"version {pinned}" if pinned else "the latest version"
        ctx.out.line(f"Schedule {args.id} runs {runs} of its template.")
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
