"""Peers: no-op jobs through Celery + Redis, django-q2 (ORM broker), procrastinate and
PgQueuer, on this machine, each on its documented fast path with its configuration printed.

For each peer, two runs of `peer_jobs` jobs, each stopped after `peer_seconds`:
- end to end: workers running, a producer process enqueues (batched where the peer has a
  batch API) while they consume; jobs/s = completed / (last completion − first enqueue);
  the whole machine's CPU (every process: producer, workers, broker, database) per job over
  the same window;
- drain-only: the jobs are enqueued with the workers stopped, then the workers start;
  jobs/s = completed / (last completion − first completion).
Completions are counted the cheapest way each peer allows (a Redis counter for Celery, rows
left in the queue table for django-q2 and PgQueuer, `succeeded` jobs for procrastinate).
Every peer has its own PostgreSQL database (or Redis db 13 for Celery), dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import (
    PYTHON,
    ROOT,
    PhaseResult,
    create_database,
    drop_database,
    dsn,
    machine_cpu_seconds,
    say,
    sizes_for,
)

PEERS = ("celery", "djangoq", "procrastinate", "pgqueuer")
PEER_LABELS = {
    "celery": "Celery + Redis",
    "djangoq": "django-q2 (ORM broker)",
    "procrastinate": "procrastinate",
    "pgqueuer": "PgQueuer",
}


def spawn(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(processes: list) -> None:
    for process in processes:
        if isinstance(process, subprocess.Popen):
            if process.poll() is None:
                os.killpg(process.pid, 15)
            try:  # measured already: a short grace, then kill
                process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
        else:  # multiprocessing.Process
            process.terminate()
            process.join(timeout=2)
            if process.is_alive():
                process.kill()
                process.join()


# --- adapters -------------------------------------------------------------------------------


class Celery:
    name = "celery"

    def __init__(self, dbname: str) -> None:
        from bench import peer_celery

        self.module = peer_celery
        self.redis = peer_celery._redis

    def config(self) -> str:
        conf = ", ".join(f"{k}={v}" for k, v in self.module.CONFIG.items() if k != "broker_url")
        return (
            f"broker {self.module.REDIS_URL}; {conf}; worker {' '.join(self.module.WORKER_ARGS)}; "
            "producer: task.apply_async() in a loop (one pooled connection)"
        )

    def setup(self) -> None:
        keys = [self.module.QUEUE, self.module.COUNTER, "unacked", "unacked_index"]
        self.redis.delete(*keys, *self.redis.keys("_kombu.binding*"))

    def teardown(self) -> None:
        self.setup()

    def start_workers(self) -> list:
        argv = [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "bench.peer_celery",
            "worker",
            *self.module.WORKER_ARGS,
        ]
        return [spawn(argv)]

    def produce(self, jobs: int, enqueued) -> None:
        for number in range(jobs):
            self.module.noop.apply_async()
            if number % 50 == 49:
                enqueued.value = number + 1
        enqueued.value = jobs

    def done(self, enqueued: int) -> int:
        return int(self.redis.get(self.module.COUNTER) or 0)


class DjangoQ:
    name = "djangoq"
    settings = "bench.peer_djangoq_settings"

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        os.environ["POP_BENCH_PEER_DB"] = dbname
        os.environ["DJANGO_SETTINGS_MODULE"] = self.settings

    def config(self) -> str:
        from bench import peer_djangoq_settings

        return (
            f"Q_CLUSTER={peer_djangoq_settings.Q_CLUSTER}; producer: async_task() per job "
            "(one INSERT each; the ORM broker has no batch enqueue)"
        )

    def setup(self) -> None:
        subprocess.run(
            [PYTHON, "-m", "django", "migrate", "--verbosity", "0"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=True,
        )
        import django

        django.setup()
        from django.db import connections

        connections.close_all()

    def teardown(self) -> None:
        from django.db import connections

        connections.close_all()

    def start_workers(self) -> list:
        return [spawn([PYTHON, "-m", "django", "qcluster"])]

    def produce(self, jobs: int, enqueued) -> None:
        from django.db import connections
        from django_q.tasks import async_task

        connections.close_all()
        for number in range(jobs):
            async_task("bench.peer_djangoq_settings.noop")
            if number % 50 == 49:
                enqueued.value = number + 1
        enqueued.value = jobs

    def done(self, enqueued: int) -> int:
        with psycopg.connect(dsn(self.dbname)) as conn:
            left = conn.execute("SELECT count(*) FROM django_q_ormq").fetchone()[0]
        return enqueued - left


class Procrastinate:
    name = "procrastinate"

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        os.environ["POP_BENCH_PEER_DSN"] = dsn(dbname)
        from bench import peer_procrastinate

        self.module = peer_procrastinate

    def config(self) -> str:
        return (
            f"PsycopgConnector; async task; {self.module.WORKER_PROCESSES} worker processes × "
            f"run_worker({self.module.WORKER_OPTIONS}); producer: task.batch_defer() of "
            f"{self.module.DEFER_BATCH}"
        )

    def setup(self) -> None:
        with self.module.app.open():
            self.module.app.schema_manager.apply_schema()

    def teardown(self) -> None:
        pass

    def start_workers(self) -> list:
        context = multiprocessing.get_context("fork")
        processes = [
            context.Process(target=self._work) for _ in range(self.module.WORKER_PROCESSES)
        ]
        for process in processes:
            process.start()
        return processes

    def _work(self) -> None:
        import logging

        logging.disable(logging.CRITICAL)
        self.module.app.run_worker(**self.module.WORKER_OPTIONS)

    def produce(self, jobs: int, enqueued) -> None:
        batch = self.module.DEFER_BATCH
        with self.module.app.open():
            for start in range(0, jobs, batch):
                size = min(batch, jobs - start)
                self.module.noop.batch_defer(*({} for _ in range(size)))
                enqueued.value = start + size

    def done(self, enqueued: int) -> int:
        with psycopg.connect(dsn(self.dbname)) as conn:
            return conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            ).fetchone()[0]


class PgQueuer:
    name = "pgqueuer"

    def __init__(self, dbname: str) -> None:
        self.dbname = dbname
        from bench import peer_pgqueuer

        self.module = peer_pgqueuer

    def config(self) -> str:
        return (
            f"PsycopgDriver (async, autocommit); {self.module.WORKER_PROCESSES} consumer "
            f"processes × QueueManager.run({self.module.RUN_OPTIONS}); producer: "
            f"Queries.enqueue() of {self.module.ENQUEUE_BATCH} per call"
        )

    async def _connect(self):
        return await psycopg.AsyncConnection.connect(dsn(self.dbname), autocommit=True)

    def setup(self) -> None:
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.queries import Queries

        async def install() -> None:
            conn = await self._connect()
            await Queries(PsycopgDriver(conn)).install()
            await conn.close()

        asyncio.run(install())

    def teardown(self) -> None:
        pass

    def start_workers(self) -> list:
        context = multiprocessing.get_context("fork")
        processes = [
            context.Process(target=self._work) for _ in range(self.module.WORKER_PROCESSES)
        ]
        for process in processes:
            process.start()
        return processes

    def _work(self) -> None:
        import logging

        from pgqueuer.db import PsycopgDriver
        from pgqueuer.qm import QueueManager
        from pgqueuer.queries import Queries

        logging.disable(logging.CRITICAL)

        async def consume() -> None:
            conn = await self._connect()
            manager = QueueManager(Queries(PsycopgDriver(conn)))

            @manager.entrypoint(self.module.ENTRYPOINT)
            async def noop(job) -> None:
                return None

            await manager.run(**self.module.RUN_OPTIONS)

        asyncio.run(consume())

    def produce(self, jobs: int, enqueued) -> None:
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.queries import Queries

        batch = self.module.ENQUEUE_BATCH

        async def enqueue() -> None:
            conn = await self._connect()
            queries = Queries(PsycopgDriver(conn))
            for start in range(0, jobs, batch):
                size = min(batch, jobs - start)
                await queries.enqueue([self.module.ENTRYPOINT] * size, [None] * size, [0] * size)
                enqueued.value = start + size
            await conn.close()

        asyncio.run(enqueue())

    def done(self, enqueued: int) -> int:
        with psycopg.connect(dsn(self.dbname)) as conn:
            left = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()[0]
        return enqueued - left


ADAPTERS = {
    "celery": Celery,
    "djangoq": DjangoQ,
    "procrastinate": Procrastinate,
    "pgqueuer": PgQueuer,
}


# --- the two runs ---------------------------------------------------------------------------


def _produce(adapter, jobs: int, enqueued) -> None:
    adapter.produce(jobs, enqueued)


def warm_up(adapter, enqueued_base: int, timeout: float = 60.0) -> int:
    """One job through the running workers, so both runs start with workers ready."""
    context = multiprocessing.get_context("fork")
    enqueued = context.Value("q", 0)
    producer = context.Process(target=_produce, args=(adapter, 1, enqueued))
    producer.start()
    producer.join()
    total = enqueued_base + 1
    deadline = time.monotonic() + timeout
    while adapter.done(total) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    if adapter.done(total) < total:
        raise RuntimeError(f"{adapter.name}: the warm-up job did not complete in {timeout:.0f} s")
    return total


def end_to_end(adapter, jobs: int, seconds: float, base: int) -> dict:
    context = multiprocessing.get_context("fork")
    enqueued = context.Value("q", 0)
    producer = context.Process(target=_produce, args=(adapter, jobs, enqueued))
    started, cpu_started = time.monotonic(), machine_cpu_seconds()
    producer.start()
    done, last_change, last_done, cpu_used = 0, started, 0, 0.0
    while time.monotonic() - started < seconds:
        done = adapter.done(base + enqueued.value) - base
        if done != last_done:
            last_done, last_change = done, time.monotonic()
            cpu_used = machine_cpu_seconds() - cpu_started
        if done >= jobs:
            break
        time.sleep(0.02)
    producer.join(timeout=seconds)
    if producer.is_alive():
        producer.terminate()
        producer.join()
    return {
        "jobs": done,
        "seconds": last_change - started,
        "rate": done / (last_change - started),
        "cpu_ms_per_job": cpu_used / max(done, 1) * 1000,
    }


def drain_only(adapter, jobs: int, seconds: float, base: int) -> dict:
    context = multiprocessing.get_context("fork")
    enqueued = context.Value("q", 0)
    producer = context.Process(target=_produce, args=(adapter, jobs, enqueued))
    producer.start()
    producer.join()
    workers = adapter.start_workers()
    try:
        total = base + jobs
        begin = time.monotonic()
        first = first_done = None
        done, last_change = 0, begin
        while time.monotonic() - begin < seconds + 10:
            done = adapter.done(total) - base
            now = time.monotonic()
            if done > 0 and first is None:
                first, first_done = now, done
            if first is not None and done != first_done:
                last_change = now
            if done >= jobs or (first is not None and now - first > seconds):
                break
            time.sleep(0.02)
    finally:
        stop(workers)
    if first is None or last_change <= first:
        return {"jobs": done, "seconds": 0.0, "rate": float("nan")}
    drained = done - first_done
    return {"jobs": done, "seconds": last_change - first, "rate": drained / (last_change - first)}


def measure(peer: str, jobs: int, seconds: float) -> dict:
    dbname = f"pop_bench_peer_{peer}"
    create_database(dbname, template=None)
    adapter = ADAPTERS[peer](dbname)
    try:
        adapter.setup()
        workers = adapter.start_workers()
        try:
            base = warm_up(adapter, 0)
            e2e = end_to_end(adapter, jobs, seconds, base)
        finally:
            stop(workers)
        # Jobs the first run left behind would make the drain look faster: the drain run
        # starts from a fresh database (and, for Celery, fresh Redis keys).
        adapter.teardown()
        drop_database(dbname)
        create_database(dbname, template=None)
        adapter = ADAPTERS[peer](dbname)
        adapter.setup()
        drain = drain_only(adapter, jobs, seconds, 0)
        return {"peer": peer, "config": adapter.config(), "e2e": e2e, "drain": drain}
    finally:
        adapter.teardown()
        drop_database(dbname)


def run(*, quick: bool, peers: tuple[str, ...] = PEERS) -> PhaseResult:
    sizes = sizes_for(quick)
    jobs, seconds = sizes["peer_jobs"], sizes["peer_seconds"]
    result = PhaseResult(
        phase="peers", sizes={"jobs per run": jobs, "a run stops after (s)": seconds}
    )
    started = time.perf_counter()
    for peer in peers:
        out = Path(tempfile.gettempdir()) / f"pop-bench-peer-{peer}-{os.getpid()}.json"
        log = out.with_suffix(".log")
        with open(log, "w") as handle:
            process = subprocess.run(
                [
                    *(PYTHON, "-m", "bench.peers", "--one", peer),
                    *("--jobs", str(jobs), "--seconds", str(seconds), "--out", str(out)),
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=4 * seconds + 180,
            )
        if process.returncode != 0 or not out.exists():
            result.notes.append(f"{PEER_LABELS[peer]}: the run failed (exit {process.returncode})")
            say(f"  peers {peer}: FAILED, see {log}")
            continue
        log.unlink()
        figures = json.loads(out.read_text())
        out.unlink()
        label = PEER_LABELS[peer]
        say(
            f"  peers {label:24} end to end {figures['e2e']['rate']:7.0f} jobs/s "
            f"({figures['e2e']['jobs']} jobs, {figures['e2e']['cpu_ms_per_job']:.2f} ms CPU each), "
            f"drain-only {figures['drain']['rate']:7.0f} jobs/s"
            f"\n      config: {figures['config']}"
        )
        result.add(f"{label} end to end", figures["e2e"]["rate"], "jobs/s", note=figures["config"])
        result.add(
            f"{label} end to end, CPU per job (whole machine)",
            figures["e2e"]["cpu_ms_per_job"],
            "ms",
        )
        result.add(f"{label} drain-only", figures["drain"]["rate"], "jobs/s")
    result.seconds = time.perf_counter() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--one", choices=PEERS, help="measure one peer (internal)")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--peers", nargs="*", choices=PEERS, default=list(PEERS))
    args = parser.parse_args()
    if args.one:
        figures = measure(args.one, args.jobs, args.seconds)
        with open(args.out, "w") as handle:
            json.dump(figures, handle)
        return
    result = run(quick=args.quick, peers=tuple(args.peers))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(result.to_dict(), handle)


if __name__ == "__main__":
    main()
