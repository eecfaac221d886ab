"""PgQueuer peer: an async no-op entrypoint, batched enqueue, psycopg async driver."""

ENTRYPOINT = "pop_bench_noop"
WORKER_PROCESSES = 2
RUN_OPTIONS = {"batch_size": 10}  # QueueManager.run(batch_size=10, mode=continuous)
ENQUEUE_BATCH = 100
