"""One live POP for one fault scenario: gunicorn, qcluster(s) and `pop worker`s on a database of
its own (a copy of the migrated template) on the suite's private PostgreSQL.

Processes start through bench/servers.py (each in its own session, so stopping one stops its
children and nothing else); the workers run scripts/cluster_demo.py's `demo` handler, which
records every operation run's start and end in `runlog`. Agendas are submitted over HTTP with
idempotency keys and every answer a test-side client gets is kept (`answers`), so a scenario
can assert that no client saw an HTML error page.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench import servers
from bench.common import PYTHON, World, live_processes_in_group, pop_env
from popclient.client import PopClient
from popclient.errors import ServerError, TransportError
from tests.faults.postgres import PrivatePostgres

# Short periods, so a scenario sees reclaims and fills within a second or two.
POP_ENV = {
    "POP_FILL_NUDGE": "async",
    "POP_FILL_INTERVAL": "0.5",
    "POP_PROMOTE_INTERVAL": "0.5",
    "POP_RECLAIM_INTERVAL": "1",
    "POP_TICKER_LINK_SECONDS": "5",
    "POP_Q_WORKERS": "2",
    "DATABASE_CONN_MAX_AGE": "60",
    "LOG_LEVEL": "WARNING",
}
# Two operations per agenda, the second after the first: about half a second of work.
OPERATIONS = [
    {"name": "first", "type": "demo", "payload": {"seconds": 0.2}},
    {"name": "second", "type": "demo", "payload": {"seconds": 0.3}, "depends_on": ["first"]},
]
TERMINAL = ("succeeded", "failed", "aborted")


@dataclass
class Answer:
    """One HTTP answer a test-side client got."""

    at: float
    method: str
    path: str
    status: int
    content_type: str
    retry_after: str | None


class RecordingTransport(httpx.HTTPTransport):
    """Keeps every answer (status, content type, Retry-After) in `answers`."""

    def __init__(self, answers: list[Answer], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answers = answers

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.answers.append(
            Answer(
                at=time.time(),
                method=request.method,
                path=request.url.path,
                status=response.status_code,
                content_type=response.headers.get("content-type", ""),
                retry_after=response.headers.get("retry-after"),
            )
        )
        return response


@dataclass
class Stack:
    postgres: PrivatePostgres
    dbname: str
    world: World
    idle_insight: str
    logs: Path
    processes: dict[str, servers.Process] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    submitted: dict[str, str] = field(default_factory=dict)  # idempotency key -> agenda id
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def runlog(self) -> Path:
        return self.logs / "runs.jsonl"

    def env(self, **extra: str) -> dict[str, str]:
        settings = {"DATABASE_URL": self.postgres.url(self.dbname), **POP_ENV, **extra}
        return pop_env(self.dbname, **settings)

    # -- processes --------------------------------------------------------------------------

    def start_web(
        self, *, workers: int = 2, threads: int = 8, env: dict[str, str] | None = None
    ) -> servers.Process:
        self.port = self.port or servers.free_port()
        argv = [
            PYTHON,
            "-m",
            "gunicorn",
            "popsite.wsgi:application",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--timeout",
            "60",
            "--graceful-timeout",
            "3",
            "--log-level",
            "warning",
        ]
        web = servers.spawn("web", argv, self.env(**(env or {})), self.logs)
        self.processes["web"] = web
        return web

    def start_cluster(self, name: str) -> servers.Process:
        cluster = servers.spawn(name, [PYTHON, "manage.py", "qcluster"], self.env(), self.logs)
        self.processes[name] = cluster
        return cluster

    def cluster_running(self, name: str) -> bool:
        """Whether cluster `name` has forked its whole family: django-q2's sentinel, pusher and
        monitor and its POP_Q_WORKERS workers, which it forks once Django is loaded."""
        expected = 4 + int(POP_ENV["POP_Q_WORKERS"])
        return live_processes_in_group(self.processes[name].pid) >= expected

    def start_worker(self, name: str, *, concurrency: int = 4) -> servers.Process:
        worker = servers.pop_worker(
            self.url,
            self.world.worker_token,
            self.world.insight_id,
            self.logs,
            name=name,
            concurrency=concurrency,
            extra=["--batch", "4", "--handlers", "cluster_demo", "--wait-seconds", "2"],
            env={
                "POP_DEMO_RUNLOG": str(self.runlog),
                "POP_DEMO_WORKER": name,
                "PYTHONPATH": f"{servers.ROOT}:{servers.ROOT / 'scripts'}",
            },
        )
        self.processes[name] = worker
        return worker

    def start(
        self,
        *,
        workers: int = 2,
        clusters: int = 1,
        threads: int = 8,
        concurrency: int = 4,
        web_env: dict[str, str] | None = None,
    ) -> None:
        web = self.start_web(threads=threads, env=web_env)
        for number in range(1, clusters + 1):
            self.start_cluster(f"cluster{number}")
        servers.wait_http(f"{self.url}/readyz", web)
        for number in range(1, workers + 1):
            self.start_worker(f"worker{number}", concurrency=concurrency)

    def stop(self) -> None:
        """SIGKILL every process group: the scenario is over and its database is dropped next,
        so nothing needs a graceful stop (a cluster's would wait for its ticker link)."""
        for process in self.processes.values():
            process.kill()

    def tails(self) -> str:
        return "\n".join(f"--- {n}\n{p.tail(15)}" for n, p in self.processes.items())

    # -- the database -----------------------------------------------------------------------

    def sql(self, query: str, params: list | tuple = (), *, timeout: float = 60.0) -> list[tuple]:
        """Rows of `query` on the scenario's database (as the superuser, so a reserved slot
        answers when POP has taken every other one), retried through outages."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(
                    self.postgres.dsn(self.dbname), autocommit=True, connect_timeout=3
                ) as conn:
                    cursor = conn.execute(query, params)
                    return cursor.fetchall() if cursor.description else []
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def set_lease_seconds(self, seconds: int) -> None:
        self.sql(
            "UPDATE resourcepools_insight SET lease_seconds = %s WHERE id = %s",
            [seconds, self.world.insight_id],
        )

    def states(self) -> dict[str, int]:
        return dict(self.sql("SELECT state, count(*) FROM agendas_agendaprogress GROUP BY state"))

    def succeeded(self) -> int:
        return self.states().get("succeeded", 0)

    def wait_until(
        self, predicate: Callable[[], bool], *, timeout: float, what: str, poll: float = 0.2
    ) -> float:
        """Seconds until `predicate()` held; fails with the processes' logs after `timeout`."""
        started = time.monotonic()
        while not predicate():
            if time.monotonic() - started > timeout:
                raise AssertionError(f"not {what} within {timeout:g} s\n{self.tails()}")
            time.sleep(poll)
        return time.monotonic() - started

    def wait_all_terminal(self, *, timeout: float) -> float:
        total = len(self.submitted)
        return self.wait_until(
            lambda: sum(self.states().get(state, 0) for state in TERMINAL) >= total,
            timeout=timeout,
            what=f"all {total} agendas terminal",
        )

    # -- clients ----------------------------------------------------------------------------

    def client(self, token: str, **kwargs: Any) -> PopClient:
        return PopClient(
            self.url, token, transport=RecordingTransport(self.answers), retries=0, **kwargs
        )

    def submit(
        self,
        count: int,
        *,
        prefix: str,
        batch_size: int = 20,
        pause: float = 0.0,
        deadline_seconds: float = 60.0,
    ) -> list[str]:
        """Submit `count` agendas in batches over HTTP (`pause` seconds apart), each batch
        repeated until it is answered (the same idempotency keys: a batch whose answer was lost
        creates nothing twice); return their ids."""
        customers = self.world.customers
        ids: list[str] = []
        deadline = time.monotonic() + deadline_seconds
        for first in range(0, count, batch_size):
            if first and pause:
                time.sleep(pause)
            customer = customers[(first // batch_size) % len(customers)]
            keys = [f"{prefix}-{n}" for n in range(first, min(count, first + batch_size))]
            batch = [
                {
                    "operations": OPERATIONS,
                    "retry_delay_seconds": 0,
                    "idempotency_key": key,
                    "link_id": prefix,
                }
                for key in keys
            ]
            with self.client(self.world.tokens[customer], timeout=30) as client:
                while True:
                    try:
                        results = client.submit_agendas_bulk(batch)
                        break
                    except (TransportError, ServerError):
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)
            refused = [result for result in results if "errors" in result]
            assert not refused, refused[:2]
            for key, result in zip(keys, results, strict=True):
                self.submitted[key] = str(result["id"])
                ids.append(str(result["id"]))
        return ids

    def submit_in_background(self, count: int, *, prefix: str, **kwargs: Any) -> threading.Thread:
        errors: list[BaseException] = []

        def run() -> None:
            try:
                self.submit(count, prefix=prefix, **kwargs)
            except BaseException as error:  # re-raised by the scenario through join_submitter
                errors.append(error)

        thread = threading.Thread(target=run, name=f"submit-{prefix}", daemon=True)
        thread.errors = errors  # type: ignore[attr-defined]
        thread.start()
        return thread


def join_submitter(thread: threading.Thread, timeout: float = 60.0) -> None:
    thread.join(timeout)
    assert not thread.is_alive(), "the submitter is still running"
    errors = thread.errors  # type: ignore[attr-defined]
    assert not errors, f"submitting failed: {errors[0]!r}"


def run_world_script(postgres: PrivatePostgres, dbname: str) -> tuple[World, str]:
    """Write the world (tests/faults/world.py) into `dbname`; its World and idle insight id."""
    import subprocess

    env = pop_env(dbname, DATABASE_URL=postgres.url(dbname))
    done = subprocess.run(
        [PYTHON, "-m", "tests.faults.world"],
        cwd=servers.ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return World(**data["world"]), data["idle_insight"]
