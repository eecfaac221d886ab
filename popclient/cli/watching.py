"""Following an agenda until it ends: the one-line progress, the watch loop behind
``agendas watch`` and every ``--wait``, and what a submit prints."""

from __future__ import annotations

import time
from typing import Any

from popclient.cli.base import (
    EXIT_FAILURE,
    EXIT_OK,
    Context,
    agenda_operations,
    agenda_percent,
    agenda_state,
    progress_bar,
)

TERMINAL_STATES = frozenset({"succeeded", "failed", "aborted"})


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
