"""Live-server fixtures: gunicorn and a real `manage.py qcluster` on pytest-django's test database.

One server and one cluster serve the whole folder (`live`, package scope): starting a cluster
per test would cost seconds each. They share the test database, so the rows they need must be
committed, not written inside a test's rolled-back transaction:

- the tests are marked `django_db`, so pytest-django creates `test_<name>`, and reads in a test
  (read committed) see what the server and the cluster commit;
- every test gets its own tenant (`tenant`): a pool, an insight, a customer, users with tokens
  and a template, written from a separate thread (its own autocommitted connection), so tests
  never pull each other's agendas;
- at the end the servers stop and the database is flushed, as a transactional test would.

Workers speak HTTP only: a `popclient.worker.Worker` in a thread (`start_worker`, with the
report answers recorded) or `pop worker` in a subprocess (`pop_command`).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, connections

from accounts.services import token_issue
from core.principals import SYSTEM
from popclient.client import PopClient
from popclient.handlers import default_registry
from popclient.worker import Worker
from resourcepools.models import Membership
from tests.factories import (
    AgendaTemplateFactory,
    CustomerFactory,
    InsightFactory,
    MembershipFactory,
    ResourcePoolFactory,
)

ROOT = Path(__file__).resolve().parents[2]
HANDLERS_MODULE = "tests.live.handlers"
OPERATION_TYPES = ["log", "echo", "sleep", "exec", "fail", "resumable_sleep"]
LEASE_SECONDS = 6  # the worker reports every 2 s
TERMINAL = {"succeeded", "failed", "aborted"}

# The agenda every tenant's template expands: a payload value travels through two operations.
TEMPLATE_AGENDA = {
    "operations": [
        {"name": "greet", "type": "echo", "payload": {"who": "@<pop.payload::/who>"}},
        {"name": "shout", "type": "echo", "payload": {"text": "hello @<greet.out::/who>"}},
    ]
}
TEMPLATE_SCHEMA = {
    "type": "object",
    "properties": {"who": {"type": "string"}},
    "required": ["who"],
}


def pop_command() -> list[str]:
    """The `pop` console script when it is installed next to this Python, else `-m popclient`."""
    script = Path(sys.executable).with_name("pop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "popclient"]


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (
        f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
        f"/{db['NAME']}"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen, *, timeout: float) -> None:
    """SIGTERM, then SIGKILL to the process group after `timeout` (0: at once)."""
    if process.poll() is None and timeout > 0:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def wait_for(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.1, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(interval)


def committed(func: Callable[[], Any]) -> Any:
    """Run `func` in a thread of its own: its own connection, autocommit, outside the test's
    transaction, so the server and the cluster see what it writes at once."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = func()
        except BaseException as error:  # re-raised in the caller
            outcome["error"] = error
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="committed-write")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    logs: Path
    web: subprocess.Popen
    cluster: subprocess.Popen

    def assert_alive(self) -> None:
        assert self.web.poll() is None, f"gunicorn died; see {self.logs / 'web.log'}"
        assert self.cluster.poll() is None, f"the cluster died; see {self.logs / 'qcluster.log'}"


@dataclass
class Tenant:
    """A farm (pool + insight, a worker token) and a customer of it (admin and viewer tokens),
    and an operator (staff token)."""

    url: str
    name: str
    customer_id: str
    insight_id: str
    insight_name: str
    template_id: str
    admin_token: str
    viewer_token: str
    worker_token: str
    staff_token: str
    clients: list[PopClient] = field(default_factory=list)

    def client(self, token: str | None = None) -> PopClient:
        client = PopClient(self.url, token or self.admin_token, timeout=30)
        self.clients.append(client)
        return client

    def agenda(self, agenda_id: str) -> dict[str, Any]:
        return self.client().get_agenda(agenda_id)

    def operations(self, agenda_id: str) -> dict[str, dict[str, Any]]:
        agenda = self.agenda(agenda_id)
        return {op["name"]: op for op in agenda["progress"]["operations"]}

    def executions(self, agenda_id: str) -> list[dict[str, Any]]:
        page = self.client().list_executions(agenda_id)
        items = page["results"] if isinstance(page, dict) else page
        return sorted(items, key=lambda execution: execution["number"])

    def wait_state(self, agenda_id: str, states: set[str] | str, *, timeout: float) -> dict:
        wanted = {states} if isinstance(states, str) else set(states)
        seen: dict[str, Any] = {}

        def reached() -> dict | None:
            seen["agenda"] = self.agenda(agenda_id)
            return seen["agenda"] if seen["agenda"]["state"] in wanted else None

        deadline = time.monotonic() + timeout
        while True:
            agenda = reached()
            if agenda:
                return agenda
            if time.monotonic() >= deadline:
                last = seen["agenda"]
                pytest.fail(
                    f"agenda {agenda_id} still {last['state']} after {timeout:g}s "
                    f"(wanted {sorted(wanted)}): {json.dumps(last['progress'], default=str)}"
                )
            time.sleep(0.1)


@pytest.fixture(scope="package")
def live(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[LiveServer]:
    """gunicorn and `manage.py qcluster` on the test database, for the whole folder."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll drowns failures
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            pytest.skip("the live server and the cluster share the test database: PostgreSQL")
        assert connection.settings_dict["NAME"].startswith("test_"), "not the test database"
        call_command("pop_schedules", stdout=open(os.devnull, "w"))
    logs = tmp_path_factory.mktemp("live")
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        # Tasks are signed: the cluster must share this process's key to accept nudges.
        "SECRET_KEY": settings.SECRET_KEY,
        "DEBUG": "false",
        "PYTHONPATH": str(ROOT),
        "POP_FILL_NUDGE": "sync",  # a submitted agenda is queued before the answer
        "POP_Q_WORKERS": "3",
        "POP_FILL_INTERVAL": "0.5",
        "POP_PROMOTE_INTERVAL": "0.5",
        "POP_RECLAIM_INTERVAL": "1",
        "POP_CRON_INTERVAL": "1",
        "POP_TICKER_LINK_SECONDS": "2",
        "POP_THROTTLE_ANON": "100000/minute",
    }
    web_log = open(logs / "web.log", "w")
    web = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "popsite.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", "2", "--threads", "16",
            "--timeout", "60", "--graceful-timeout", "2", "--no-control-socket",
        ],
        cwd=ROOT, env=env, stdout=web_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    cluster_log = open(logs / "qcluster.log", "w")
    cluster = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT, env=env, stdout=cluster_log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    server = LiveServer(f"http://127.0.0.1:{port}", env, logs, web, cluster)
    try:

        def ready() -> bool:
            server.assert_alive()
            try:
                return all(
                    httpx.get(f"{server.url}{path}", timeout=2).status_code == 200
                    for path in ("/readyz", "/healthz/scheduler")
                )
            except httpx.HTTPError:
                return False

        # Ready = gunicorn answers and a ticker link of the cluster finished.
        wait_for(ready, timeout=60, interval=0.2, what="gunicorn and the cluster to be ready")
        yield server
    finally:
        stop_process(cluster, timeout=5)
        stop_process(web, timeout=10)
        web_log.close()
        cluster_log.close()
        with django_db_blocker.unblock():
            connections.close_all()
            call_command("flush", interactive=False, verbosity=0)


def _make_tenant(url: str) -> Tenant:
    name = f"live-{uuid.uuid4().hex[:8]}"
    owner = CustomerFactory(slug=f"{name}-farm", name=f"{name} farm")
    pool = ResourcePoolFactory(name=f"{name}-pool", owner=owner)
    insight = InsightFactory(
        resource_pool=pool,
        name=f"{name}-insight",
        mappers={"operation_type": OPERATION_TYPES},
        lease_seconds=LEASE_SECONDS,
        queue_size=10,
    )
    customer = CustomerFactory(slug=name, name=name, resource_pool=pool)
    template = AgendaTemplateFactory(
        customer=customer,
        name=f"{name}-hello",
        description="greets @<pop.payload::/who>",
        agenda=TEMPLATE_AGENDA,
        payload_schema=TEMPLATE_SCHEMA,
    )

    def token(customer, role: str) -> str:
        # Tokens only: an unusable password spares three slow password hashes per test.
        user = get_user_model().objects.create(username=f"{name}-{role}", password="!")
        MembershipFactory(user=user, customer=customer, role=role)
        return token_issue(principal=SYSTEM, user=user, name="live").key

    return Tenant(
        url=url,
        name=name,
        customer_id=str(customer.pk),
        insight_id=str(insight.pk),
        insight_name=insight.name,
        template_id=str(template.pk),
        admin_token=token(customer, Membership.Role.ADMIN),
        viewer_token=token(customer, Membership.Role.VIEWER),
        worker_token=token(owner, Membership.Role.WORKER),
        staff_token=token_issue(
            principal=SYSTEM,
            user=get_user_model().objects.create(
                username=f"{name}-operator", password="!", is_staff=True
            ),
            name="live",
        ).key,
    )


@pytest.fixture
def tenant(live) -> Iterator[Tenant]:
    created = committed(lambda: _make_tenant(live.url))
    yield created
    for client in created.clients:
        client.close()
    live.assert_alive()


class RecordingClient(PopClient):
    """A PopClient that remembers when each report answer arrived and what it said."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answers: list[tuple[float, str, dict[str, Any], Any]] = []
        self._lock = threading.Lock()

    def report(self, execution_id: str, lease_token: str, **fields: Any) -> Any:
        answer = super().report(execution_id, lease_token, **fields)
        with self._lock:
            self.answers.append((time.monotonic(), str(execution_id), fields, answer))
        return answer

    def report_batch(self, reports: list[Any]) -> list[Any]:
        results = super().report_batch(reports)
        at = time.monotonic()
        with self._lock:
            for report, result in zip(reports, results, strict=False):
                self.answers.append((at, str(report["execution"]), dict(report), result))
        return results

    def first_answer(self, execution_id: str, flag: str) -> float | None:
        """Monotonic time the first answer with `flag` (abort/pause) true came back."""
        with self._lock:
            for at, execution, _, answer in self.answers:
                if execution == execution_id and isinstance(answer, dict) and answer.get(flag):
                    return at
        return None


@dataclass
class WorkerThread:
    worker: Worker
    client: RecordingClient
    thread: threading.Thread
    exit_code: list[int]

    def stop(self, *, timeout: float = 30) -> None:
        self.worker.stop(immediate=True)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker thread did not stop"
        self.client.close()


@pytest.fixture
def start_worker(tenant) -> Iterator[Callable[..., WorkerThread]]:
    """Start a `Worker` on the tenant's insight in a thread; stopped after the test."""
    started: list[WorkerThread] = []

    def start(*, allow_exec: bool = False, **options: Any) -> WorkerThread:
        client = RecordingClient(tenant.url, tenant.worker_token, timeout=30)
        options.setdefault("wait_seconds", 1)
        options.setdefault("name", f"thread-{len(started)}")
        worker = Worker(
            client,
            tenant.insight_id,
            registry=default_registry(allow_exec=allow_exec, modules=[HANDLERS_MODULE]),
            **options,
        )
        exit_code: list[int] = []
        thread = threading.Thread(
            target=lambda: exit_code.append(worker.run()), name="pop-worker", daemon=True
        )
        thread.start()
        handle = WorkerThread(worker, client, thread, exit_code)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()
