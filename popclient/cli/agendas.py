"""``pop agendas``: submit, list, show, watch, abort/pause/resume and rerun agendas, and list
their executions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from popclient.cli.agenda_sets import cmd_agendas_act_on_set
from popclient.cli.base import (
    EXIT_OK,
    EXIT_VALIDATION,
    Context,
    UsageError,
    _cell,
    _results,
    add_command,
    agenda_id,
    agenda_operations,
    agenda_percent,
    agenda_state,
    progress_bar,
)
from popclient.cli.watching import _after_submit, _watch


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``agendas`` and its actions."""
    agendas = commands.add_parser("agendas", help="submit, list, watch and control agendas")
    agenda_commands = agendas.add_subparsers(dest="subcommand", metavar="ACTION", required=True)

    submit = add_command(
        agenda_commands, common, "submit", "submit an agenda from a JSON file (- for stdin)"
    )
    submit.add_argument("file", help="agenda JSON ({operations: [...]}, or a list of operations)")
    submit.add_argument("--bulk", action="store_true", help="the file holds a list of agendas")
    submit.add_argument("--link-id")
    submit.add_argument("--external-id")
    submit.add_argument("--priority", type=int, choices=range(10), metavar="0-9")
    submit.add_argument("--max-attempts", type=int)
    submit.add_argument("--retry-delay", type=int, dest="retry_delay_seconds")
    submit.add_argument(
        "--cost", type=float, metavar="SECONDS", help="expected execution time (fair share)"
    )
    submit.add_argument("--insight", dest="default_insight", help="preferred insight (name or id)")
    submit.add_argument("--customer", help="needed when you belong to several customers")
    submit.add_argument("--callback-url")
    submit.add_argument("--run-after", help="ISO time before which it is not run")
    submit.add_argument("--do-not-run", action="store_true", help="create it but never queue it")
    submit.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="label it (repeatable)"
    )
    submit.add_argument("--idempotency-key")
    submit.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="ID",
        help="stay pending until this agenda (of the same customer) succeeds (repeatable)",
    )
    submit.add_argument(
        "--after-link",
        action="append",
        default=[],
        metavar="LINK",
        help="…until every agenda with this link id does (repeatable)",
    )
    submit.add_argument(
        "--after-on",
        choices=["succeeded", "completed"],
        help="wait until they succeeded (default) or just ended",
    )
    submit.add_argument(
        "--after-failure",
        choices=["fail", "abort"],
        help="with succeeded: fail (default) or abort it when one of them fails",
    )
    submit.add_argument(
        "--wait", action="store_true", help="watch until it ends (exit 1 if failed)"
    )
    submit.set_defaults(handler=cmd_agendas_submit)

    listing = add_command(agenda_commands, common, "list", "list agendas")
    for option in ("state", "link-id", "customer", "insight", "template", "external-id"):
        dest = option.replace("-", "_")
        listing.add_argument(f"--{option}", dest=f"filter_{dest}", metavar=dest.upper())
    listing.add_argument(
        "--label",
        action="append",
        dest="filter_label",
        metavar="KEY=VALUE",
        help="only agendas with this label (repeat: all must match)",
    )
    listing.add_argument("--by-cid", dest="filter_cid", metavar="CID", help="created with this cid")
    listing.add_argument("--created-after", dest="filter_created_after", metavar="TIME")
    listing.add_argument("--created-before", dest="filter_created_before", metavar="TIME")
    listing.add_argument("--ordering", dest="filter_ordering", metavar="FIELD", help="-created_at")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--offset", type=int)
    listing.add_argument("--all", action="store_true", help="follow every page")
    listing.set_defaults(handler=cmd_agendas_list)

    show = add_command(agenda_commands, common, "show", "show an agenda with its operations")
    show.add_argument("id")
    show.set_defaults(handler=cmd_agendas_show)

    watch = add_command(agenda_commands, common, "watch", "live progress until the agenda ends")
    watch.add_argument("id")
    watch.add_argument("--interval", type=float, default=1.0, help="seconds between polls (1)")
    watch.add_argument("--max-wait", type=float, help="give up (exit 1) after this many seconds")
    watch.set_defaults(handler=cmd_agendas_watch)

    for name, help_text in (
        ("abort", "abort an agenda (a running one is stopped by its worker)"),
        ("pause", "pause an agenda (a running one stops after its running operations)"),
        ("resume", "resume a paused agenda"),
    ):
        action = add_command(agenda_commands, common, name, help_text + SET_HELP)
        action.add_argument("id", nargs="?", help="the agenda (or give --filter/--label)")
        if name == "pause":
            action.add_argument(
                "--now",
                action="store_true",
                help="stop running operations at once (their progress is kept for the resume)",
            )
        _add_set_options(action)
        action.set_defaults(handler=cmd_agendas_action, action=name)

    rerun = add_command(
        agenda_commands, common, "rerun", "run a finished or paused agenda again" + SET_HELP
    )
    rerun.add_argument("id", nargs="?", help="the agenda (or give --filter/--label)")
    rerun.add_argument("--mode", choices=["continue", "reset_all", "operations_to_reset"])
    rerun.add_argument("--operations", help="comma-separated operations to reset")
    rerun.add_argument("--skip-execution", action="store_true")
    rerun.add_argument("--wait", action="store_true")
    _add_set_options(rerun)
    rerun.set_defaults(handler=cmd_agendas_rerun, action="rerun")

    executions = add_command(
        agenda_commands, common, "executions", "list an agenda's execution attempts"
    )
    executions.add_argument("id")
    executions.set_defaults(handler=cmd_agendas_executions)


SET_HELP = "; with --filter/--label, every agenda they match"


def _add_set_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--filter",
        action="append",
        metavar="KEY=VALUE",
        help="act on every agenda matching (the list's filters: state, link_id, template, "
        "insight, customer, created_after, ...; repeatable)",
    )
    parser.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="only agendas with this label"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="with --filter: only count what would change"
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="with --filter: print the job id and return"
    )


def _on_a_set(ctx: Context) -> bool:
    """Whether the command acts on a filter's set (else on one agenda); refuses both/neither."""
    args = ctx.args
    on_set = bool(args.filter or args.label)
    if on_set and args.id:
        raise UsageError("give an agenda id or --filter/--label, not both")
    if not on_set and not args.id:
        raise UsageError("give an agenda id, or --filter/--label to act on every match")
    if not on_set and (args.dry_run or args.no_wait):
        raise UsageError("--dry-run and --no-wait go with --filter/--label")
    return on_set


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
            "cost", "default_insight", "customer", "callback_url", "run_after",
        )
        if getattr(args, key) is not None
    }  # fmt: skip
    if args.do_not_run:
        overrides["do_not_run"] = True
    after = _after(args)
    if after:
        overrides["after"] = after
    params = _parse_params(args.param)
    labels = _parse_labels(args.label)
    client = ctx.client()
    if args.bulk:
        items = document.get("agendas") if isinstance(document, dict) else document
        if not isinstance(items, list):
            raise UsageError('--bulk needs a list of agendas (or {"agendas": [...]})')
        agendas = [_with_overrides(item, overrides, params, labels) for item in items]
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
        _with_overrides(document, overrides, params, labels),
        idempotency_key=args.idempotency_key,
    )
    return _after_submit(ctx, agenda, wait=args.wait)


def _after(args: argparse.Namespace) -> dict[str, Any] | None:
    """`--after`, `--after-link`, `--after-on`, `--after-failure` → the submit's `after`."""
    if not args.after and not args.after_link:
        if args.after_on or args.after_failure:
            raise UsageError("--after-on and --after-failure need --after or --after-link")
        return None
    after: dict[str, Any] = {}
    if args.after:
        after["agendas"] = list(args.after)
    if args.after_link:
        after["link_ids"] = list(args.after_link)
    if args.after_on:
        after["on"] = args.after_on
    if args.after_failure:
        after["on_failure"] = args.after_failure
    return after


def _with_overrides(
    agenda: Any, overrides: dict[str, Any], params: dict[str, Any], labels: dict[str, str]
) -> Any:
    if not isinstance(agenda, dict):
        return agenda
    merged = {**agenda, **overrides}
    if params:
        merged["params"] = {**(agenda.get("params") or {}), **params}
    if labels:
        merged["labels"] = {**(agenda.get("labels") or {}), **labels}
    return merged


def _parse_labels(pairs: list[str]) -> dict[str, str]:
    """`--label KEY=VALUE` options → {key: value} (the value is text, as labels are)."""
    labels = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise UsageError(f"--label {pair!r}: write it KEY=VALUE")
        labels[key] = value
    return labels


def cmd_agendas_list(ctx: Context) -> int:
    args = ctx.args
    filters = {
        key[len("filter_") :]: value
        for key, value in vars(args).items()
        if key.startswith("filter_") and value is not None
    }
    if "label" in filters:  # KEY=VALUE on the command line, key:value in the API
        filters["label"] = [f"{k}:{v}" for k, v in _parse_labels(filters["label"]).items()]
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
    agenda = ctx.client().get_agenda(agenda_id(ctx, ctx.args.id))
    if ctx.out.as_json:
        ctx.out.json(agenda)
        return EXIT_OK
    progress = agenda.get("progress") or {}
    out = ctx.out
    out.line(f"Agenda     {agenda.get('id')}")
    out.line(f"State      {agenda_state(agenda)}  {progress_bar(agenda_percent(agenda))} "
             f"{agenda_percent(agenda):.0f}%")  # fmt: skip
    waiting = agenda.get("waiting_reason") or {}
    for label, value in (
        ("Message", progress.get("message")),
        ("Waiting", waiting.get("message")),
        ("After", _after_text(agenda.get("after"))),
        ("Link id", agenda.get("link_id")),
        ("Labels", ", ".join(f"{k}={v}" for k, v in (agenda.get("labels") or {}).items())),
        ("Priority", agenda.get("priority")),
        ("Attempts", _attempts(agenda, progress)),
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
    outputs = [
        [
            output.get("operation"),
            output.get("kind"),
            " ".join(where for where in (output.get("path"), output.get("url")) if where),
            output.get("bytes"),
        ]
        for output in agenda.get("outputs") or []
    ]
    if outputs:
        out.line()
        out.table(outputs, ["output of", "kind", "path / url", "bytes"])
    for entry in progress.get("diagnostics") or []:
        out.line(f"! {entry.get('time', '')} {entry.get('message', '')}")
    return EXIT_OK


def _after_text(after: dict[str, Any] | None) -> str | None:
    """ "3 of 10 agendas left (on succeeded)" for an agenda submitted with `after`."""
    if not after:
        return None
    left = f"{after.get('remaining')} of {after.get('total')} agendas left"
    return f"{left} (on {after.get('on')}, on failure {after.get('on_failure')})"


def _attempts(agenda: dict[str, Any], progress: dict[str, Any]) -> str | None:
    """ "attempt 1 of 3" while executing, "2 of 3 used" otherwise (older servers: completed)."""
    started = progress.get("attempts_started", progress.get("attempts_completed"))
    if started is None:
        return None
    of = f" of {agenda['max_attempts']}" if agenda.get("max_attempts") else ""
    if agenda_state(agenda) == "executing":
        return f"attempt {started}{of}"
    return f"{started}{of} used"


def cmd_agendas_watch(ctx: Context) -> int:
    return _watch(
        ctx, agenda_id(ctx, ctx.args.id), interval=ctx.args.interval, max_wait=ctx.args.max_wait
    )


def cmd_agendas_action(ctx: Context) -> int:
    if _on_a_set(ctx):
        return cmd_agendas_act_on_set(ctx)
    client = ctx.client()
    action = {
        "abort": client.abort_agenda,
        "pause": lambda agenda: client.pause_agenda(agenda, now=ctx.args.now),
        "resume": client.resume_agenda,
    }[ctx.args.action]
    agenda = action(agenda_id(ctx, ctx.args.id)) or {}
    if ctx.out.as_json:
        ctx.out.json(agenda)
    else:
        state = agenda_state(agenda) if agenda else "?"
        ctx.out.line(f"Agenda {ctx.args.id}: {ctx.args.action} accepted (state {state})")
    return EXIT_OK


def cmd_agendas_rerun(ctx: Context) -> int:
    args = ctx.args
    if _on_a_set(ctx):
        if args.operations or args.skip_execution:
            raise UsageError("a rerun of a set takes --mode continue or reset_all only")
        return cmd_agendas_act_on_set(ctx)
    operations = [name.strip() for name in (args.operations or "").split(",") if name.strip()]
    mode = args.mode or ("operations_to_reset" if operations else "continue")
    if mode == "operations_to_reset" and not operations:
        raise UsageError("--mode operations_to_reset needs --operations")
    args.id = agenda_id(ctx, args.id)
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
    executions = _results(ctx.client().list_executions(agenda_id(ctx, ctx.args.id)))
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
