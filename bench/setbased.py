"""Set-based sketch: what pull + report cost on POP's own tables as one statement each.

NOT POP code: a benchmark of the change bench/RESULTS.md proposes for the engine. Same
database shape, same 2 processes, same three shapes and table size as the engine phase, but
each pull is one data-modifying CTE (claim the queue rows and lock their progress rows with
SKIP LOCKED, delete the queue rows, insert the executions with their attempt number, move the
progress rows to executing) plus one SELECT of the operations the answer carries; each report
(single or batch) is one CTE (check lease tokens and currency under FOR UPDATE, end the
executions, mark the operations and the agendas succeeded). Raw psycopg, no ORM: the gap
between this and the engine phase is what ORM statement building and per-row round trips cost.
It skips what the engine also does (callback outbox rows when a URL is set, metrics, the
fill nudge), so it is an upper bound to aim at, not a promise.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time

import psycopg

from bench.common import (
    TEMPLATE_DB,
    PhaseResult,
    World,
    close_django_connections,
    create_database,
    django_setup,
    drop_database,
    dsn,
    say,
    sizes_for,
    vacuum_analyze,
)
from bench.engine import PROCESSES, SHAPES, limit_rate, prepare
from bench.outcomes import pulled_twice

BASE_DB = "pop_bench_setbased"
PULL = """
WITH picked AS (
    SELECT q.id AS queue_id, p.id AS progress_id, p.agenda_id, p.customer_id, p.link_id, p.cid,
           p.last_execution_number
    FROM scheduling_queuedagenda q
    JOIN agendas_agendaprogress p ON p.agenda_id = q.agenda_id AND p.state = 'queued'
    WHERE q.insight_id = %(insight)s
    ORDER BY q.position
    LIMIT %(count)s
    FOR UPDATE OF q, p SKIP LOCKED
), claimed AS (
    DELETE FROM scheduling_queuedagenda q USING picked WHERE q.id = picked.queue_id
    RETURNING q.id
), executions AS (
    INSERT INTO agendas_execution (id, agenda_id, customer_id, link_id, cid, number, insight_id,
        worker, lease_token, lease_expires_at, started_at, diagnostics, created_at, updated_at)
    SELECT gen_random_uuid(), picked.agenda_id, picked.customer_id, picked.link_id, picked.cid,
        picked.last_execution_number + 1,
        %(insight)s, %(worker)s, gen_random_uuid(), now() + interval '60 seconds', now(),
        '[]'::jsonb, now(), now()
    FROM picked JOIN claimed ON claimed.id = picked.queue_id
    RETURNING id, agenda_id, lease_token, number, lease_expires_at
)
UPDATE agendas_agendaprogress p
SET state = 'executing', current_execution_id = x.id, started_at = coalesce(p.started_at, now()),
    last_execution_number = x.number, message = 'executing on ' || %(worker)s,
    updated_at = now()
FROM executions x
WHERE p.agenda_id = x.agenda_id
RETURNING p.id, p.agenda_id, x.id, x.lease_token, x.number, x.lease_expires_at
"""
OPERATIONS = """
SELECT a.id, a.operations, a.params, o.agenda_progress_id, o.name, o.state, o.percent_complete,
       o.result, o.params, o.diagnostics
FROM agendas_agenda a
JOIN agendas_agendaprogress p ON p.agenda_id = a.id
JOIN agendas_operationprogress o ON o.agenda_progress_id = p.id
WHERE a.id = ANY(%s::uuid[])
ORDER BY o.agenda_progress_id, o.position
"""
REPORT = """
WITH items(execution_id, lease_token) AS (
    SELECT * FROM unnest(%s::uuid[], %s::uuid[])
), current AS (
    SELECT e.id, p.id AS progress_id
    FROM agendas_execution e
    JOIN items i ON i.execution_id = e.id AND i.lease_token = e.lease_token
    JOIN agendas_agendaprogress p
      ON p.agenda_id = e.agenda_id AND p.current_execution_id = e.id AND p.state = 'executing'
    WHERE e.outcome IS NULL
    ORDER BY e.id
    FOR UPDATE OF e, p
), ended AS (
    UPDATE agendas_execution e
    SET outcome = 'succeeded', ended_at = now(), last_report_at = now(), updated_at = now()
    FROM current WHERE e.id = current.id
    RETURNING e.id
), operations AS (
    UPDATE agendas_operationprogress o
    SET state = 'succeeded', percent_complete = 100, completed_at = now(), updated_at = now()
    FROM current WHERE o.agenda_progress_id = current.progress_id
    RETURNING o.id
)
UPDATE agendas_agendaprogress p
SET state = 'succeeded', percent_complete = 100, attempts_completed = p.attempts_completed + 1,
    completed_at = now(), current_execution_id = NULL, message = 'succeeded', updated_at = now()
FROM current WHERE p.id = current.progress_id
RETURNING p.agenda_id
"""


def worker(dbname: str, insight_id: str, batch: int, batched: bool, seconds: float, start, out):
    name = multiprocessing.current_process().name
    done = refused = 0
    with psycopg.connect(dsn(dbname)) as conn:
        start.wait()
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            rows = conn.execute(
                PULL, {"insight": insight_id, "count": batch, "worker": name}
            ).fetchall()
            if not rows:
                conn.commit()
                break
            conn.execute(OPERATIONS, [[row[1] for row in rows]]).fetchall()
            conn.commit()
            groups = [rows] if batched else [[row] for row in rows]
            for group in groups:
                ended = conn.execute(
                    REPORT, [[row[2] for row in group], [row[3] for row in group]]
                ).fetchall()
                conn.commit()
                refused += len(group) - len(ended)
            done += len(rows)
        out.put((done, began, time.perf_counter(), refused))


def run_shape(world: World, shape: str, rows: int, seconds: float) -> dict:
    batch, batched = SHAPES[shape]
    dbname = f"{BASE_DB}_{shape.replace('-', '')}"
    create_database(dbname, template=BASE_DB)
    try:
        vacuum_analyze(dbname)
        context = multiprocessing.get_context("fork")
        start, out = context.Barrier(PROCESSES), context.Queue()
        processes = [
            context.Process(
                target=worker,
                args=(dbname, world.insight_id, batch, batched, seconds, start, out),
                name=f"s{n}",
            )
            for n in range(PROCESSES)
        ]
        for process in processes:
            process.start()
        results = [out.get(timeout=600) for _ in processes]
        for process in processes:
            process.join()
        done = sum(r[0] for r in results)
        elapsed = max(r[2] for r in results) - min(r[1] for r in results)
        problem = outcome_problem(dbname, done, refused=any(r[3] for r in results))
    finally:
        drop_database(dbname)
    return {"done": done, "seconds": elapsed, "rate": done / elapsed, "problem": problem}


def outcome_problem(dbname: str, done: int, *, refused: bool) -> str:
    """Why a sketch run is not valid ("" when it is): an agenda pulled twice in one attempt,
    a report refused, or succeeded agendas that are not the ones the workers counted."""
    with psycopg.connect(dsn(dbname)) as conn:
        succeeded = conn.execute(
            "SELECT count(*) FROM agendas_agendaprogress WHERE state = 'succeeded'"
        ).fetchone()[0]
    if pulled_twice(dbname):
        return "an agenda was pulled twice in one attempt"
    if succeeded != done or refused:
        return f"succeeded {succeeded} of {done} pulled"
    return ""


def run(*, quick: bool, limit: PhaseResult | None = None) -> PhaseResult:
    sizes = sizes_for(quick)
    rows, seconds = sizes["queue_rows"], sizes["shape_seconds"]
    result = PhaseResult(
        phase="setbased",
        sizes={"queue rows": rows, "processes": PROCESSES, "seconds per shape (max)": seconds},
    )
    started = time.perf_counter()
    create_database(BASE_DB, template=TEMPLATE_DB)
    try:
        django_setup(BASE_DB, POP_FILL_NUDGE="off")
        world, _, _ = prepare(BASE_DB, rows, 1)
        close_django_connections()
        for shape in SHAPES:
            figures = run_shape(world, shape, rows, seconds)
            if figures["problem"]:
                result.rejected = f"{shape}: {figures['problem']}"
            say(
                f"  set-based sketch {shape:10} {figures['done']:>6} of {rows} in "
                f"{figures['seconds']:5.2f} s = {figures['rate']:7.0f} agendas/s"
                + (f"  REJECTED: {figures['problem']}" if figures["problem"] else "")
            )
            raw = limit_rate(limit, shape)
            result.add(
                f"SQL sketch pull + report {shape} (not POP code)",
                figures["rate"],
                "agendas/s",
                ratio=figures["rate"] / raw if raw else None,
                reference=f"raw {shape}",
            )
    finally:
        close_django_connections()
        drop_database(BASE_DB)
    result.seconds = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--limit", help="the limit phase's JSON, for the ratios")
    parser.add_argument("--out")
    args = parser.parse_args()
    limit = None
    if args.limit:
        with open(args.limit) as handle:
            limit = PhaseResult.from_dict(json.load(handle))
    result = run(quick=args.quick, limit=limit)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result.to_dict(), handle)


if __name__ == "__main__":
    main()
