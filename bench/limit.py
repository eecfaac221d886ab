"""Limit: raw psycopg on a table shaped like QueuedAgenda, 2 processes, three shapes.

Each claim is one statement (a data-modifying CTE: DELETE the queue rows picked with
FOR UPDATE SKIP LOCKED, mark their jobs executing); each completion is one UPDATE. Autocommit,
so every statement is its own transaction and commit (fsync'ed WAL flush, as POP's are).

- claim-1:   claim 1, complete it (2 commits per job)
- claim-10:  claim 10, then commit each completion on its own (1.1 commits per job)
- claim-100: claim 100, complete them in one UPDATE (0.02 commits per job)
"""

from __future__ import annotations

import multiprocessing
import time
import uuid

import psycopg

from bench.common import (
    PhaseResult,
    bench_database,
    dsn,
    phase_main,
    say,
    sizes_for,
    vacuum_analyze,
)

SHAPES = {"claim-1": (1, False), "claim-10": (10, False), "claim-100": (100, True)}
PROCESSES = 2

SCHEMA = """
CREATE TABLE bench_job (
    id uuid PRIMARY KEY,
    state varchar(20) NOT NULL,
    worker varchar(100) NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    completed_at timestamptz
);
CREATE TABLE bench_queue (
    id bigserial PRIMARY KEY,
    agenda_id uuid NOT NULL UNIQUE REFERENCES bench_job (id),
    insight_id uuid NOT NULL,
    customer_id uuid NOT NULL,
    position bigint NOT NULL,
    queued_at timestamptz NOT NULL
);
CREATE INDEX bench_queue_order ON bench_queue (insight_id, position);
"""
CLAIM = """
WITH claimed AS (
    DELETE FROM bench_queue WHERE id IN (
        SELECT id FROM bench_queue WHERE insight_id = %s
        ORDER BY position LIMIT %s FOR UPDATE SKIP LOCKED
    ) RETURNING agenda_id
)
UPDATE bench_job j SET state = 'executing', started_at = now(), worker = %s
FROM claimed WHERE j.id = claimed.agenda_id
RETURNING j.id
"""
COMPLETE_ONE = (
    "UPDATE bench_job SET state = 'succeeded', completed_at = now() "
    "WHERE id = %s AND state = 'executing'"
)
COMPLETE_MANY = (
    "UPDATE bench_job SET state = 'succeeded', completed_at = now() "
    "WHERE id = ANY(%s) AND state = 'executing'"
)


def fill_table(dbname: str, rows: int, insight_id: str) -> None:
    with psycopg.connect(dsn(dbname)) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_queue, bench_job")
        conn.execute(SCHEMA)
        conn.execute(
            "INSERT INTO bench_job (id, state) SELECT gen_random_uuid(), 'queued' "
            "FROM generate_series(1, %s)",
            [rows],
        )
        conn.execute(
            "INSERT INTO bench_queue (agenda_id, insight_id, customer_id, position, queued_at) "
            "SELECT id, %s, %s, row_number() OVER (ORDER BY id), now() FROM bench_job",
            [insight_id, str(uuid.uuid4())],
        )
    vacuum_analyze(dbname, ["bench_job", "bench_queue"])


def worker(
    dbname: str, insight_id: str, batch: int, batched_complete: bool, seconds: float, start, out
) -> None:
    name = multiprocessing.current_process().name
    done = 0
    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        claim = conn.cursor()
        complete = conn.cursor()
        start.wait()
        began = time.perf_counter()
        deadline = began + seconds
        while time.perf_counter() < deadline:
            ids = [row[0] for row in claim.execute(CLAIM, [insight_id, batch, name]).fetchall()]
            if not ids:
                break
            if batched_complete:
                complete.execute(COMPLETE_MANY, [ids])
            else:
                for job_id in ids:
                    complete.execute(COMPLETE_ONE, [job_id])
            done += len(ids)
        out.put((done, began, time.perf_counter()))


def commit_latency(dbname: str, count: int = 200) -> float:
    """Milliseconds per single-row UPDATE + commit, one process: the fsync floor of this disk."""
    with psycopg.connect(dsn(dbname), autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_commit (x int)")
        conn.execute("INSERT INTO bench_commit VALUES (0)")
        started = time.perf_counter()
        for _ in range(count):
            conn.execute("UPDATE bench_commit SET x = x + 1")
        elapsed = time.perf_counter() - started
        conn.execute("DROP TABLE bench_commit")
    return elapsed / count * 1000


def run_shape(dbname: str, shape: str, rows: int, seconds: float) -> dict:
    """Claim and complete from a table of `rows` queued jobs until it is empty or `seconds`
    have passed; the rate is jobs completed over the wall time of the two processes."""
    batch, batched = SHAPES[shape]
    insight_id = str(uuid.uuid4())
    fill_table(dbname, rows, insight_id)
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(PROCESSES), context.Queue()
    processes = [
        context.Process(
            target=worker,
            args=(dbname, insight_id, batch, batched, seconds, start, out),
            name=f"w{n}",
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
    with psycopg.connect(dsn(dbname)) as conn:
        left, succeeded = conn.execute(
            "SELECT (SELECT count(*) FROM bench_queue), "
            "(SELECT count(*) FROM bench_job WHERE state = 'succeeded')"
        ).fetchone()
    if succeeded != done or left != rows - done:
        raise RuntimeError(f"{shape}: claimed {done}, succeeded {succeeded}, left {left} of {rows}")
    return {"shape": shape, "rows": rows, "done": done, "seconds": elapsed, "rate": done / elapsed}


def run(*, quick: bool) -> PhaseResult:
    sizes = sizes_for(quick)
    result = PhaseResult(
        phase="limit",
        sizes={
            "queue rows": sizes["queue_rows"],
            "processes": PROCESSES,
            "seconds per shape (max)": sizes["shape_seconds"],
        },
    )
    started = time.perf_counter()
    with bench_database("pop_bench_limit", template=None) as dbname:
        latency = commit_latency(dbname)
        say(f"  limit fsync'ed commit, 1 process: {latency:.2f} ms")
        result.add("one-row UPDATE commit, 1 process", latency, "ms")
        for shape in SHAPES:
            figures = run_shape(dbname, shape, sizes["queue_rows"], sizes["shape_seconds"])
            say(
                f"  limit {shape:10} {figures['done']:>7} of {figures['rows']} jobs in "
                f"{figures['seconds']:6.2f} s = {figures['rate']:8.0f} jobs/s"
            )
            result.add(f"raw psycopg {shape}", figures["rate"], "jobs/s")
    result.seconds = time.perf_counter() - started
    return result


if __name__ == "__main__":
    phase_main(run, __doc__)
