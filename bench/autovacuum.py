"""In place of autovacuum, for the benchmark runs on a server that runs without it."""

from __future__ import annotations

import multiprocessing
from contextlib import contextmanager

import psycopg

from bench.common import HOT_TABLES, admin_connect, dsn


@contextmanager
def autovacuum_stand_in(dbname: str, *, every: float = 2.0):
    """While the block runs, vacuum and analyse the hot tables as autovacuum would, from a
    process of its own, when the server's autovacuum is off (it is, on this CI machine).

    Every `every` seconds (autovacuum's naptime, a minute by default, is far longer than a
    benchmark run) it applies autovacuum's own rule to each hot table, with the table's
    storage parameters where the migrations set them (the queue, lane and schedule-info
    tables), else the server's settings (`autovacuum_vacuum_threshold`, `…_scale_factor`,
    their `insert` and `analyze` kin): VACUUM a table whose dead rows, or rows inserted since
    its last vacuum, pass the threshold plus the scale factor times its rows; ANALYZE one
    whose rows changed since its last analyse pass theirs (PostgreSQL's documentation, "The
    Autovacuum Daemon"). It reads the statistics the backends have sent, about a second old
    while they work.

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


def _setting(name: str) -> str:
    """The table's own storage parameter `name` where it sets one, else the server's."""
    return (
        f"coalesce((SELECT split_part(o, '=', 2) FROM unnest(c.reloptions) o "
        f"WHERE split_part(o, '=', 1) = '{name}'), current_setting('{name}'))::float8"
    )


# Per hot table: whether autovacuum would VACUUM it and whether it would ANALYZE it now.
_DUE = f"""
SELECT s.relname,
       s.n_dead_tup > {_setting("autovacuum_vacuum_threshold")}
           + {_setting("autovacuum_vacuum_scale_factor")} * greatest(c.reltuples, 0)
       OR s.n_ins_since_vacuum > {_setting("autovacuum_vacuum_insert_threshold")}
           + {_setting("autovacuum_vacuum_insert_scale_factor")} * greatest(c.reltuples, 0),
       s.n_mod_since_analyze > {_setting("autovacuum_analyze_threshold")}
           + {_setting("autovacuum_analyze_scale_factor")} * greatest(c.reltuples, 0)
FROM pg_stat_user_tables s
JOIN pg_class c ON c.oid = s.relid
WHERE s.schemaname = 'public' AND s.relname = ANY(%s)
"""


def tables_due(conn: psycopg.Connection) -> list[tuple[str, bool, bool]]:
    """(table, vacuum it, analyse it) for each hot table autovacuum would work on now."""
    rows = conn.execute(_DUE, [list(HOT_TABLES)]).fetchall()
    return [(table, vacuum, analyze) for table, vacuum, analyze in rows if vacuum or analyze]


# The command for a table due for (vacuum, analyse).
_COMMANDS = {(True, True): "VACUUM (ANALYZE)", (True, False): "VACUUM", (False, True): "ANALYZE"}


def _vacuum_every(dbname: str, every: float, stop) -> None:
    while not stop.wait(every):
        try:
            with psycopg.connect(dsn(dbname), autocommit=True) as conn:
                for table, vacuum, analyze in tables_due(conn):
                    conn.execute(f'{_COMMANDS[vacuum, analyze]} "{table}"')
        except psycopg.Error:
            pass  # a table locked or the run ending: the next round comes soon
