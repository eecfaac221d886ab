"""procrastinate peer: an async no-op task on a PsycopgConnector; jobs kept as `succeeded`."""

import os

import procrastinate

DSN = os.environ.get("POP_BENCH_PEER_DSN", "")
QUEUE = "pop_bench"
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DSN))
# Async tasks + worker concurrency + LISTEN/NOTIFY: procrastinate's documented fast path.
WORKER_OPTIONS = {"queues": [QUEUE], "concurrency": 10, "listen_notify": True, "wait": True}
WORKER_PROCESSES = 2
DEFER_BATCH = 100


@app.task(name="pop_bench.noop", queue=QUEUE)
async def noop() -> None:
    return None
