"""Set-based sketch of the whole cycle: what PostgreSQL itself spends per agenda on the
contract's rows, written as few statements as the schema allows.

NOT POP code: the evidence for bench/RESULTS.md's "the database's own minimum" figure. On
POP's own tables and indexes (the lanes schema: ready rows, customer lanes, the queue), each
process loops over one customer's work:

- submit 100: one data-modifying CTE writes the agendas, their progress (`ready`), one
  operation each, the ready rows and wakes the customer's lane;
- fill: under the insight's try-lock, one CTE takes the active lanes in `served` order
  (`lane_turn_order`) and from each its oldest ready rows (`ready_fair_order`), deletes
  them, queues them at the insight's next positions, moves their progress to `queued` and
  charges the lanes a turn each;
- pull 10: the claim CTE of bench/setbased.py (queue and progress locked SKIP LOCKED, queue
  rows deleted, executions inserted numbered one after the progress row's last, progress to
  `executing`) plus the read of the operations the answer carries;
- batch report 10: bench/setbased.py's REPORT (lease checked under FOR UPDATE, execution
  ended, operations and agenda succeeded).

The same rows POP writes per agenda, a handful of statements per 10 or 100 agendas, no ORM,
no HTTP, no validation, no callbacks, metrics or nudges: a floor, not a promise. It runs
under the same autovacuum stand-in as POP's run over HTTP (bench/autovacuum.py: without its
ANALYZE the sketch's operations read was planned on the empty tables and scanned them as they
grew, 41 pages an agenda instead of 9). Its figures, per agenda, set beside POP's own in the
same run (bench.over_http, bench.e2e): PostgreSQL's CPU (its processes, from /proc) and the
client's; the WAL the server wrote; and the shared buffers the database's backends touched
(pg_stat_database: pages read or found, the stand-in's included), the work itself, which
another process's load on the cores does not inflate as it inflates CPU.
"""

from __future__ import annotations

import json
import multiprocessing
import time

import psycopg

from bench.autovacuum import autovacuum_stand_in
from bench.common import (
    NOOP_OPERATIONS,
    TEMPLATE_DB,
    PhaseResult,
    close_django_connections,
    cpu_seconds,
    create_database,
    django_setup,
    drop_database,
    dsn,
    make_world,
    phase_main,
    say,
)
from bench.outcomes import STATS_FLUSH_SECONDS, buffers_touched, wal_written
from bench.setbased import OPERATIONS, PULL, REPORT, outcome_problem

BASE_DB = "pop_bench_setbased_cycle"
PROCESSES = 2
SUBMIT_BATCH = 100
PULL_BATCH = 10
QUEUE_SIZE = 100

SUBMIT = """
WITH new AS (
    SELECT gen_random_uuid() AS id, gen_random_uuid() AS progress_id, g
    FROM generate_series(1, %(n)s) g
), agendas AS (
    INSERT INTO agendas_agenda (id, link_id, cid, created_at, updated_at, customer_id,
        insight_id, operations, params, priority, max_attempts, retry_delay_seconds,
        callback_url, external_id, idempotency_key, labels)
    SELECT id, '', 'sketch', now(), now(), %(customer)s, %(insight)s, %(operations)s::jsonb,
        '{}'::jsonb, 5, 3, 0, '', '', '', '{}'::jsonb
    FROM new
    RETURNING id
), progress AS (
    INSERT INTO agendas_agendaprogress (id, link_id, cid, created_at, updated_at, agenda_id,
        customer_id, state, message, percent_complete, attempts_completed, attempts_started,
        do_not_run, abort_requested, pause_requested, pause_now, diagnostics)
    SELECT progress_id, '', 'sketch', now(), now(), id, %(customer)s, 'ready', '', 0, 0, 0,
        false, false, false, false, '[]'::jsonb
    FROM new
    RETURNING id
), operations AS (
    INSERT INTO agendas_operationprogress (id, agenda_progress_id, customer_id, link_id, cid,
        position, name, type, state, message, percent_complete, attempt_count, result, params,
        diagnostics, is_generated, created_at, updated_at)
    SELECT gen_random_uuid(), progress_id, %(customer)s, '', 'sketch', 0, 'noop', 'noop',
        'waiting', '', 0, 0, NULL, '{}'::jsonb, '[]'::jsonb, false, now(), now()
    FROM new
    RETURNING id
), ready AS (
    INSERT INTO scheduling_readyagenda (agenda_id, insight_id, customer_id, priority, added_at)
    SELECT id, %(insight)s, %(customer)s, 5, clock_timestamp() FROM new
    RETURNING agenda_id
), lane AS (
    INSERT INTO scheduling_customerlane (insight_id, customer_id, active, served,
        pending_count, pending_charge)
    VALUES (%(insight)s, %(customer)s, true, 0, 0, 0)
    ON CONFLICT (insight_id, customer_id) DO UPDATE SET active = true
    RETURNING id
)
SELECT id FROM agendas
"""
FILL = """
WITH room AS (
    SELECT %(queue_size)s - (SELECT count(*) FROM scheduling_queuedagenda
                             WHERE insight_id = %(insight)s) AS n
), lanes AS (
    SELECT l.id, l.customer_id, row_number() OVER (ORDER BY l.served, l.customer_id) AS turn
    FROM scheduling_customerlane l
    WHERE l.insight_id = %(insight)s AND l.active
    ORDER BY l.served, l.customer_id
    LIMIT greatest((SELECT n FROM room), 0)
), picked AS (
    SELECT r.agenda_id, r.customer_id, lanes.id AS lane_id,
        row_number() OVER (ORDER BY r.rank, lanes.turn) AS rank
    FROM lanes, LATERAL (
        SELECT x.agenda_id, x.customer_id,
            row_number() OVER (ORDER BY x.priority DESC, x.added_at) AS rank
        FROM scheduling_readyagenda x
        WHERE x.insight_id = %(insight)s AND x.customer_id = lanes.customer_id
        ORDER BY x.priority DESC, x.added_at
        LIMIT greatest((SELECT n FROM room), 0)
    ) r
    ORDER BY r.rank, lanes.turn
    LIMIT greatest((SELECT n FROM room), 0)
), taken AS (
    DELETE FROM scheduling_readyagenda r USING picked WHERE r.agenda_id = picked.agenda_id
    RETURNING r.agenda_id
), info AS (
    UPDATE scheduling_insightscheduleinfo
    SET next_position = next_position + (SELECT count(*) FROM taken), last_fill_at = now(),
        last_fill_count = (SELECT count(*) FROM taken)
    WHERE insight_id = %(insight)s
    RETURNING next_position - (SELECT count(*) FROM taken) AS first
), queued AS (
    INSERT INTO scheduling_queuedagenda (agenda_id, insight_id, customer_id, position,
        queued_at)
    SELECT picked.agenda_id, %(insight)s, picked.customer_id, info.first + picked.rank - 1,
        now()
    FROM picked JOIN taken ON taken.agenda_id = picked.agenda_id, info
    RETURNING agenda_id
), moved AS (
    UPDATE agendas_agendaprogress p
    SET state = 'queued', message = '', current_execution_id = NULL, updated_at = now()
    FROM queued WHERE p.agenda_id = queued.agenda_id
    RETURNING p.id
)
UPDATE scheduling_customerlane l
SET served = l.served + turns.n
FROM (SELECT lane_id, count(*) AS n FROM picked GROUP BY lane_id) turns
WHERE l.id = turns.lane_id
RETURNING (SELECT count(*) FROM moved)
"""


def worker(dbname: str, insight_id: str, customer_id: str, lock: int, seconds, start, out):
    """Loop: submit 100, then fill and pull 10 + report 10 until this round's work is done."""
    operations = json.dumps(NOOP_OPERATIONS)
    done = refused = 0
    with psycopg.connect(dsn(dbname)) as conn:
        start.wait()
        began, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - began < seconds:
            conn.execute(
                SUBMIT,
                {
                    "n": SUBMIT_BATCH,
                    "customer": customer_id,
                    "insight": insight_id,
                    "operations": operations,
                },
            ).fetchall()
            conn.commit()
            for _ in range(SUBMIT_BATCH // PULL_BATCH):
                if conn.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock]).fetchone()[0]:
                    conn.execute(FILL, {"insight": insight_id, "queue_size": QUEUE_SIZE})
                conn.commit()
                rows = conn.execute(
                    PULL, {"insight": insight_id, "count": PULL_BATCH, "worker": "sketch"}
                ).fetchall()
                if not rows:
                    conn.commit()
                    continue
                conn.execute(OPERATIONS, [[row[1] for row in rows]]).fetchall()
                conn.commit()
                ended = conn.execute(
                    REPORT, [[row[2] for row in rows], [row[3] for row in rows]]
                ).fetchall()
                conn.commit()
                refused += len(rows) - len(ended)
                done += len(ended)
        out.put((done, began, time.perf_counter(), refused, time.process_time() - cpu))


def run(*, quick: bool) -> PhaseResult:
    seconds = 5.0 if quick else 10.0
    result = PhaseResult(
        phase="cycle",
        sizes={
            "whole-cycle sketch: processes": PROCESSES,
            "submit, pull, report batches": [SUBMIT_BATCH, PULL_BATCH, PULL_BATCH],
            "queue size": QUEUE_SIZE,
            "seconds": seconds,
        },
    )
    create_database(BASE_DB, template=TEMPLATE_DB)
    try:
        django_setup(BASE_DB, POP_FILL_NUDGE="off")
        from scheduling.models import InsightScheduleInfo

        world = make_world(customers=PROCESSES, queue_size=QUEUE_SIZE)
        InsightScheduleInfo.objects.get_or_create(insight_id=world.insight_id)
        close_django_connections()
        time.sleep(STATS_FLUSH_SECONDS)
        with autovacuum_stand_in(BASE_DB):
            figures = _measure(world, seconds)
    finally:
        close_django_connections()
        drop_database(BASE_DB)
    say(
        f"  set-based whole cycle: {figures['done']} agendas in {figures['seconds']:.2f} s = "
        f"{figures['rate']:.0f}/s; CPU per agenda: PostgreSQL {figures['pg_ms']:.3f} ms, "
        f"client {figures['client_ms']:.3f} ms; WAL {figures['wal']:,.0f} bytes, "
        f"{figures['buffers']:.1f} shared buffers touched"
        + (f"  REJECTED: {figures['problem']}" if figures["problem"] else "")
    )
    if figures["problem"]:
        result.rejected = f"whole cycle: {figures['problem']}"
    label = "SQL sketch whole cycle: submit 100, fill, pull 10, report 10 (not POP code)"
    result.add(label, figures["rate"], "agendas/s")
    result.add(f"{label}, CPU per agenda: postgresql", figures["pg_ms"], "ms")
    result.add(f"{label}, CPU per agenda: client", figures["client_ms"], "ms")
    result.add(f"{label}, WAL written per agenda", figures["wal"], "bytes")
    result.add(f"{label}, shared buffers touched per agenda", figures["buffers"], "pages")
    return result


def _measure(world, seconds: float) -> dict:
    context = multiprocessing.get_context("fork")
    start, out = context.Barrier(PROCESSES + 1), context.Queue()
    processes = [
        context.Process(
            target=worker,
            args=(BASE_DB, world.insight_id, customer, 22_0001, seconds, start, out),
        )
        for customer in world.customers[:PROCESSES]
    ]
    for process in processes:
        process.start()
    before, wal_before = cpu_seconds({})["postgresql"], wal_written()
    buffers_before = buffers_touched(BASE_DB)
    start.wait()
    results = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    pg = cpu_seconds({})["postgresql"] - before
    wal = wal_written() - wal_before
    time.sleep(STATS_FLUSH_SECONDS)
    buffers = buffers_touched(BASE_DB) - buffers_before
    done = sum(r[0] for r in results)
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    problem = outcome_problem(BASE_DB, done, refused=any(r[3] for r in results))
    return {
        "done": done,
        "seconds": elapsed,
        "rate": done / elapsed,
        "pg_ms": pg / done * 1000,
        "client_ms": sum(r[4] for r in results) / done * 1000,
        "wal": wal / done,
        "buffers": buffers / done,
        "problem": problem,
    }


if __name__ == "__main__":
    phase_main(run, __doc__)
