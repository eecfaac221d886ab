"""End to end: a real `manage.py qcluster` and HTTP pullers against the live server.

The cluster runs the timed processes (the ticker: fill, promote, reclaim) and the fill nudges;
the pullers only speak HTTP. On an idle system a submitted agenda is pullable within a
second; 300 agendas of 3 customers must all succeed, and an agenda whose
puller is killed mid-run (SIGKILL, after one report) must be reclaimed when its lease expires
and succeed on its next attempt.
"""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.db.models import Count

from accounts.services import token_issue
from agendas.models import AgendaProgress, Execution
from agendas.services import agenda_submit
from core.principals import SYSTEM
from tests.factories import CustomerFactory

ROOT = Path(__file__).resolve().parents[2]
AGENDAS_PER_CUSTOMER = 100
PULLERS = 3

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the cluster shares the test database"
    ),
]

# A puller that takes one agenda, reports its first operation running, says which execution
# it holds, then hangs until it is killed.
DOOMED_PULLER = textwrap.dedent(
    """
    import sys, time, httpx
    base, token, insight = sys.argv[1:4]
    client = httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30)
    while True:
        items = client.post(
            f"/api/v1/insights/{insight}/pull/",
            json={"count": 1, "worker": "doomed", "wait_seconds": 5},
        ).json()["agendas"]
        if items:
            break
    item = items[0]
    execution = item["execution"]
    client.post(
        f"/api/v1/executions/{execution['id']}/report/",
        json={"operations": [{"name": "probe", "state": "executing", "percent_complete": 10}]},
        headers={"X-POP-Lease": execution["lease_token"]},
    ).raise_for_status()
    print(execution["id"], flush=True)
    time.sleep(600)
    """
)


def _database_url() -> str:
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (
        f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
        f"/{db['NAME']}"
    )


@pytest.fixture
def cluster_env() -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": _database_url(),
        # Tasks are signed: the cluster must share this process's key to accept its nudges.
        "SECRET_KEY": settings.SECRET_KEY,
        "POP_Q_WORKERS": "3",
        "POP_FILL_INTERVAL": "0.5",
        "POP_PROMOTE_INTERVAL": "0.5",
        "POP_RECLAIM_INTERVAL": "1",
        "POP_TICKER_LINK_SECONDS": "5",
        "POP_FILL_NUDGE": "async",
    }


@pytest.fixture
def qcluster(live_server, cluster_env, tmp_path):
    """`manage.py pop_schedules` then a real `manage.py qcluster`, stopped after the test."""
    call_command("pop_schedules", stdout=open(os.devnull, "w"))
    log = open(tmp_path / "qcluster.log", "w")
    process = subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env=cluster_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield process
    _stop(process, timeout=20)
    log.close()


def _stop(process: subprocess.Popen, *, timeout: float) -> None:
    """SIGTERM the process (the cluster then stops its own workers), SIGKILL its group after
    `timeout`; `timeout=0` kills at once."""
    if process.poll() is None and timeout > 0:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _pull_loop(base: str, token: str, insight_id: str, stop: threading.Event, errors: list):
    client = httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30)
    try:
        while not stop.is_set():
            response = client.post(
                f"/api/v1/insights/{insight_id}/pull/",
                json={"count": 10, "worker": threading.current_thread().name, "wait_seconds": 1},
            )
            response.raise_for_status()
            items = response.json()["agendas"]
            if not items:
                continue
            reports = [
                {
                    "execution": item["execution"]["id"],
                    "lease_token": item["execution"]["lease_token"],
                    "operations": [
                        {"name": op["name"], "state": "succeeded", "result": {"ok": True}}
                        for op in item["progress"]["operations"]
                        if op["state"] != "succeeded"
                    ],
                    "state": "succeeded",
                }
                for item in items
            ]
            answer = client.post("/api/v1/executions/report/", json={"reports": reports})
            answer.raise_for_status()
            statuses = [result["status"] for result in answer.json()["results"]]
            assert statuses == [200] * len(items), answer.json()
    except BaseException as error:
        errors.append(error)
    finally:
        client.close()


def test_300_agendas_of_3_customers_succeed_and_a_killed_pullers_agenda_is_reclaimed(
    qcluster, live_server, pool, insight, make_principal, worker, operations
):
    insight.queue_size = 20
    insight.lease_seconds = 3
    insight.save()
    token = token_issue(principal=SYSTEM, user=worker.user, name="e2e-worker").key
    principals = [
        make_principal(CustomerFactory(slug=f"e2e-{n}", resource_pool=pool)) for n in range(3)
    ]
    # On an idle system a submitted agenda is pullable in under a second (docs/design.md §6.2): the
    # on-commit nudge reaches the cluster, whose fill queues it while the puller long-polls.
    idle_client = httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Token {token}"}, timeout=30
    )
    for attempt in ("warm-up", "idle"):
        started = time.monotonic()
        agenda, _ = agenda_submit(
            principal=principals[0].user, customer=principals[0].customer, operations=operations
        )
        items = idle_client.post(
            f"/api/v1/insights/{insight.pk}/pull/", json={"count": 1, "wait_seconds": 15}
        ).json()["agendas"]
        pullable_after = time.monotonic() - started
        assert [item["agenda"]["id"] for item in items] == [str(agenda.pk)], attempt
        execution = items[0]["execution"]
        idle_client.post(
            f"/api/v1/executions/{execution['id']}/report/",
            json={"state": "succeeded"},
            headers={"X-POP-Lease": execution["lease_token"]},
        ).raise_for_status()
    idle_client.close()
    assert pullable_after < 1.0, f"pullable after {pullable_after:.2f} s"

    doomed = subprocess.Popen(
        [sys.executable, "-c", DOOMED_PULLER, live_server.url, token, str(insight.pk)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        for n in range(AGENDAS_PER_CUSTOMER):
            for principal in principals:
                agenda_submit(
                    principal=principal.user,
                    customer=principal.customer,
                    operations=operations,
                    retry_delay_seconds=0,
                    link_id=f"e2e-{n}",
                )
        killed_execution = doomed.stdout.readline().strip()  # its agenda is mid-run now
        assert killed_execution
    finally:
        _stop(doomed, timeout=0)  # SIGKILL: the puller dies mid-agenda

    stop, errors = threading.Event(), []
    threads = [
        threading.Thread(
            target=_pull_loop,
            args=(live_server.url, token, str(insight.pk), stop, errors),
            name=f"puller-{n}",
        )
        for n in range(PULLERS)
    ]
    for thread in threads:
        thread.start()
    total = AGENDAS_PER_CUSTOMER * len(principals) + 2  # and the warm-up and idle ones
    deadline = time.monotonic() + 120
    succeeded = 0
    while time.monotonic() < deadline and not errors:
        succeeded = AgendaProgress.objects.filter(state__in=["succeeded"]).count()
        if succeeded == total:
            break
        time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)

    assert errors == []
    assert qcluster.poll() is None, "the cluster died"
    assert succeeded == total
    states = dict(AgendaProgress.objects.values_list("state").annotate(n=Count("pk")))
    assert states == {"succeeded": total}
    killed = Execution.objects.get(pk=killed_execution)
    assert killed.outcome == "reclaimed"
    assert killed.diagnostics[0]["message"].startswith(
        "lease expired: no report from worker doomed"
    )
    retried = list(
        Execution.objects.filter(agenda_id=killed.agenda_id).values_list("number", "outcome")
    )
    assert sorted(retried) == [(1, "reclaimed"), (2, "succeeded")]
    assert Execution.objects.filter(outcome="succeeded").count() == total
    assert Execution.objects.count() == total + 1
