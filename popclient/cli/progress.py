"""``pop progress``: progress summary of the agendas sharing a link id."""

from __future__ import annotations

import argparse
from typing import Any

from popclient.cli.base import EXIT_OK, Context, add_command, progress_bar


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``progress``."""
    summary = add_command(
        commands, common, "progress", "progress summary of the agendas sharing a link id"
    )
    summary.add_argument("link_id")
    summary.set_defaults(handler=cmd_progress)


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
