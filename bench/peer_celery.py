"""Celery + Redis peer: a no-op task; the bench counts completions with one Redis INCR."""

import os

import redis
from celery import Celery

REDIS_URL = os.environ.get("POP_BENCH_REDIS", "redis://127.0.0.1:6379/13")
QUEUE = "pop-bench"
COUNTER = "pop-bench:done"

app = Celery("pop_bench", broker=REDIS_URL)
# The documented settings for many short tasks: no results, a large prefetch, acks on receipt.
CONFIG = {
    "broker_url": REDIS_URL,
    "task_ignore_result": True,
    "task_acks_late": False,
    "worker_prefetch_multiplier": 64,
    "task_default_queue": QUEUE,
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
}
app.conf.update(CONFIG)
WORKER_ARGS = [
    "--pool=prefork",
    "--concurrency=2",
    "--without-gossip",
    "--without-mingle",
    "--without-heartbeat",
    f"--queues={QUEUE}",
    "--loglevel=WARNING",
]
_redis = redis.Redis.from_url(REDIS_URL)


@app.task(name="pop_bench.noop")
def noop() -> None:
    _redis.incr(COUNTER)
