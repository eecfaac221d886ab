"""In place of autovacuum, for the benchmark runs on a server that runs without it."""

from __future__ import annotations

import multiprocessing
from contextlib import contextmanager

import psycopg

from bench.common import admin_connect, vacuum_analyze


@contextmanager
def autovacuum_stand_in(dbname: str, *, every: float = 2.0):
    """While the block runs, VACUUM (ANALYZE) the hot tables every `every` seconds from a
    process of its own, when the server's autovacuum is off (it is, on this CI machine).

    A production PostgreSQL runs autovacuum, whose ANALYZE keeps the planner's picture of
    tables that a run grows from empty (and, on the hot path, invalidates the prepared
    statements planned on that picture: docs/decisions.md, "Prepared statements"). Without
    it a run's plans are those of its first seconds. Its CPU counts as PostgreSQL's.
    """
    with admin_connect() as conn:
        running = conn.execute("SHOW autovacuum").fetchone()[0] == "on"
    if running:
        yield
        return
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    worker = context.Process(target=_vacuum_every, args=(dbname, every, stop), daemon=True)
    worker.start()
    try:
        yield
    finally:
        stop.set()
        worker.join(timeout=30)


def _vacuum_every(dbname: str, every: float, stop) -> None:
    while not stop.wait(every):
        try:
            vacuum_analyze(dbname)
        except psycopg.Error:
            pass  # a table locked or the run ending: the next round comes soon
