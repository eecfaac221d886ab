"""``pop templates``: list and show templates, run one, or preview the agenda a run would
submit; list a template's versions and show what changed between two."""

from __future__ import annotations

import argparse
import json
from typing import Any

from popclient.cli.base import (
    EXIT_OK,
    EXIT_VALIDATION,
    Context,
    _cell,
    _json_argument,
    _results,
    add_command,
    template_id,
)
from popclient.cli.watching import _after_submit


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``templates`` and its actions."""
    templates = commands.add_parser("templates", help="list, show, run and preview templates")
    template_commands = templates.add_subparsers(dest="subcommand", metavar="ACTION", required=True)
    template_list = add_command(template_commands, common, "list", "list templates you can use")
    template_list.add_argument("--limit", type=int, default=100)
    template_list.set_defaults(handler=cmd_templates_list)
    template_show = add_command(template_commands, common, "show", "show a template")
    template_show.add_argument("id")
    template_show.set_defaults(handler=cmd_templates_show)
    for name, help_text in (
        ("run", "run a template with a payload; prints the new agenda"),
        ("preview", "print the agenda a run would submit, without submitting"),
    ):
        run = add_command(template_commands, common, name, help_text)
        run.add_argument("id")
        run.add_argument(
            "--payload", type=_json_argument, default={}, help="JSON, @file or - (stdin)"
        )
        run.add_argument(
            "--version",
            dest="template_version",
            type=_version_number,
            metavar="N",
            help="the template version to expand (default: its latest)",
        )
        if name == "run":
            run.add_argument("--link-id")
            run.add_argument("--priority", type=int, choices=range(10), metavar="0-9")
            run.add_argument("--external-id")
            run.add_argument("--wait", action="store_true")
        run.set_defaults(handler=cmd_templates_run, preview=name == "preview")
    versions = add_command(
        template_commands, common, "versions", "list a template's versions, newest first"
    )
    versions.add_argument("id")
    versions.add_argument("--limit", type=int, default=100)
    versions.set_defaults(handler=cmd_templates_versions)
    diff = add_command(
        template_commands, common, "diff", "show what changed from version A to version B"
    )
    diff.add_argument("id")
    diff.add_argument("old", metavar="A", type=_version_number)
    diff.add_argument("new", metavar="B", type=_version_number)
    diff.set_defaults(handler=cmd_templates_diff)


def _version_number(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a version number: {text!r}")
    return int(text)


def cmd_templates_list(ctx: Context) -> int:
    templates = _results(ctx.client().list_templates(limit=ctx.args.limit))
    if ctx.out.as_json:
        ctx.out.json(templates)
        return EXIT_OK
    rows = [[t.get("id"), t.get("name"), t.get("description")] for t in templates]
    ctx.out.table(rows, ["id", "name", "description"])
    return EXIT_OK


def cmd_templates_show(ctx: Context) -> int:
    template = ctx.client().get_template(template_id(ctx, ctx.args.id))
    if ctx.out.as_json:
        ctx.out.json(template)
        return EXIT_OK
    ctx.out.line(f"Template   {template.get('id')}  {template.get('name', '')}")
    if template.get("description"):
        ctx.out.line(f"           {template['description']}")
    if template.get("latest_version"):
        ctx.out.line(f"Version    {template['latest_version']} (latest; `pop templates versions`)")
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
    if args.template_version is not None:
        fields["version"] = args.template_version
    client = ctx.client()
    args.id = template_id(ctx, args.id)
    if args.preview:
        preview = client.preview_template(args.id, args.payload, **fields)
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


def cmd_templates_versions(ctx: Context) -> int:
    client = ctx.client()
    versions = _results(
        client.list_template_versions(template_id(ctx, ctx.args.id), limit=ctx.args.limit)
    )
    if ctx.out.as_json:
        ctx.out.json(versions)
        return EXIT_OK
    rows = [
        [v.get("number"), v.get("created_at"), v.get("author") or "", v.get("note") or ""]
        for v in versions
    ]
    ctx.out.table(rows, ["version", "saved", "by", "note"])
    return EXIT_OK


def cmd_templates_diff(ctx: Context) -> int:
    args = ctx.args
    diff = ctx.client().diff_template_versions(template_id(ctx, args.id), args.old, args.new)
    if ctx.out.as_json:
        ctx.out.json(diff)
    elif not diff.get("changed"):
        ctx.out.line(f"Versions {args.old} and {args.new} are the same.")
    else:
        for line in diff.get("diff") or []:
            ctx.out.line(line)
    return EXIT_OK
