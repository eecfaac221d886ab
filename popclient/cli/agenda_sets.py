"""``pop agendas abort|pause|resume|rerun --filter KEY=VALUE --label KEY=VALUE [--dry-run]``:
an action on every agenda a filter matches, carried out by the server as a job in batches; the
command follows the job until it is done (``--no-wait``: print its id and return)."""

from __future__ import annotations

import time
from typing import Any

from popclient.cli.base import EXIT_FAILURE, EXIT_OK, Context, UsageError

# Filters that may be given several times (the API takes a list).
REPEATABLE = ("state", "label")
POLL_SECONDS = 0.5


def selection_filter(pairs: list[str], labels: list[str]) -> dict[str, Any]:
    """`--filter state=failed --filter template=ID --label batch=42` → the API's filter object
    (`{"state": ["failed"], "template": "ID", "label": ["batch:42"]}`)."""
    selection: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--filter {pair!r}: write it KEY=VALUE (e.g. state=failed)")
        if key in REPEATABLE:
            selection.setdefault(key, []).append(value)
        elif key in selection:
            raise UsageError(f"--filter {key} given twice; only state and label repeat")
        else:
            selection[key] = value
    for pair in labels:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {pair!r}: write it KEY=VALUE")
        selection.setdefault("label", []).append(f"{key}:{value}")
    return selection


def cmd_agendas_act_on_set(ctx: Context) -> int:
    args = ctx.args
    selection = selection_filter(args.filter or [], args.label or [])
    client = ctx.client()
    mode = getattr(args, "mode", None) or ("now" if getattr(args, "now", False) else None)
    answer = client.act_on_agendas(args.action, filter=selection, mode=mode, dry_run=args.dry_run)
    out = ctx.out
    if args.dry_run:
        if out.as_json:
            out.json(answer)
        else:
            out.line(
                f"{args.action}: {answer['matched']} agendas match, "
                f"{answer['would_change']} would change (dry run: nothing done)"
            )
        return EXIT_OK
    if args.no_wait:
        if out.as_json:
            out.json(answer)
        else:
            out.line(f"{args.action} job {answer['id']}: {answer['matched']} agendas match")
        return EXIT_OK
    job = _follow(ctx, answer)
    if out.as_json:
        out.json(job)
    else:
        for reason, count in sorted((job.get("skipped") or {}).items()):
            out.line(f"  skipped {count}: {reason}")
        if job.get("error"):
            out.line(f"  failed: {job['error']}")
    return EXIT_OK if job.get("status") == "done" else EXIT_FAILURE


def _follow(ctx: Context, job: dict[str, Any]) -> dict[str, Any]:
    """Poll the job until it is done, printing a line whenever it moves."""
    client = ctx.client()
    last = None
    while True:
        seen = (job.get("processed"), job.get("changed"), job.get("status"))
        if seen != last and not ctx.out.as_json:
            skipped = sum((job.get("skipped") or {}).values())
            ctx.out.line(
                f"{job.get('action')} job {job.get('id')}: {job.get('processed')}/"
                f"{job.get('matched')} done, {job.get('changed')} changed, {skipped} skipped"
                f" ({job.get('status')})"
            )
            last = seen
        if job.get("done"):
            return job
        time.sleep(POLL_SECONDS)
        job = client.get_agenda_action(job["id"])
