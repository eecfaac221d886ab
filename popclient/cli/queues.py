"""``pop queues``: queue depths per insight."""

from __future__ import annotations

import argparse
from typing import Any

from popclient.cli.base import EXIT_OK, Context, _results, add_command


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``queues``."""
    queues = add_command(commands, common, "queues", "queue depths per insight")
    queues.set_defaults(handler=cmd_queues)


def cmd_queues(ctx: Context) -> int:
    queues = _results(ctx.client().queues())
    if ctx.out.as_json:
        ctx.out.json(queues)
        return EXIT_OK
    rows = []
    for q in queues:
        name = q.get("insight_name") or q.get("name") or q.get("insight")
        oldest = q.get("oldest_ready_age_seconds", q.get("oldest_ready_age"))
        rows.append(
            [name, f"{q.get('queued', 0)}/{q.get('queue_size', '?')}", q.get("ready"),
             q.get("executing"), f"{float(oldest):.0f}s" if oldest is not None else None]
        )  # fmt: skip
    ctx.out.table(rows, ["insight", "queued", "ready", "executing", "oldest ready"])
    return EXIT_OK
