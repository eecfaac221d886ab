"""The popclient worker against the live server: an agenda that fails in a generated operation
is retried at the point of failure with its generated operations (docs/design.md §4, §6.4)."""

import threading
from collections import Counter

import pytest
from django.db import connection

from accounts.services import token_issue
from agendas.models import AgendaProgress, Execution, OperationProgress
from core.principals import SYSTEM
from popclient import PopClient
from popclient.handlers import HandlerError, HandlerRegistry
from popclient.worker import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def _run_worker(live_server, worker, insight, *, split, work) -> int:
    """One popclient worker over HTTP, `split` for mediainfo and `work` for log, until it has
    run two agendas (the failed attempt and its retry); returns its exit code."""
    client = PopClient(
        live_server.url, token_issue(principal=SYSTEM, user=worker.user, name="w").key
    )
    puller = Worker(
        client,
        str(insight.pk),
        registry=HandlerRegistry({"mediainfo": split, "log": work}),
        name="gen-worker",
        concurrency=1,
        batch=1,
        wait_seconds=1,
        max_agendas=2,
        idle_exit_seconds=10,
    )
    try:
        return puller.run()
    finally:
        client.close()
        connection.close()


def test_a_retry_reruns_only_the_failed_generated_operation(
    live_server, settings, submitter, submit_agenda, insight, worker
):
    settings.POP_FILL_NUDGE = "sync"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    calls: Counter = Counter()
    lock = threading.Lock()

    def split(payload, ctx):
        with lock:
            calls["split"] += 1
        ctx.add_operations(
            [
                {"name": "chunk-1", "type": "log", "payload": {"part": 1}},
                {
                    "name": "chunk-2",
                    "type": "log",
                    "payload": {"part": 2, "after": "@<chunk-1.out::/file>"},
                    "depends_on": ["chunk-1"],
                },
            ]
        )
        return {"parts": 2}

    def work(payload, ctx):
        with lock:
            calls["chunk", payload["part"]] += 1
            attempt = calls["chunk", payload["part"]]
        if payload["part"] == 2 and attempt == 1:
            raise HandlerError("encoder crashed", code="E42")
        return {"file": f"p{payload['part']}.ts", "after": payload.get("after")}

    agenda = submit_agenda(
        submitter,
        retry_delay_seconds=0,
        operations=[{"name": "split", "type": "mediainfo", "payload": {}}],
    )
    exit_code = _run_worker(live_server, worker, insight, split=split, work=work)

    assert exit_code == 0
    assert AgendaProgress.objects.get(agenda=agenda).state == "succeeded"
    outcomes = list(
        Execution.objects.filter(agenda=agenda).order_by("number").values_list("outcome")
    )
    assert outcomes == [("failed",), ("succeeded",)]
    assert calls == {"split": 1, ("chunk", 1): 1, ("chunk", 2): 2}
    results = dict(
        OperationProgress.objects.filter(agenda_progress__agenda=agenda).values_list(
            "name", "result"
        )
    )
    assert results == {
        "split": {"parts": 2},
        "chunk-1": {"file": "p1.ts", "after": None},
        "chunk-2": {"file": "p2.ts", "after": "p1.ts"},
    }


def test_a_generator_that_failed_after_generating_runs_again_on_the_retry(
    live_server, settings, submitter, submit_agenda, insight, worker
):
    settings.POP_FILL_NUDGE = "sync"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    calls: Counter = Counter()

    def split(payload, ctx):
        calls["split"] += 1
        ctx.add_operations([{"name": "chunk-1", "type": "log", "payload": {"part": 1}}])
        if calls["split"] == 1:
            raise HandlerError("lost the manifest after generating", code="E7")
        return {"parts": 1}

    def work(payload, ctx):
        calls["chunk", payload["part"]] += 1
        return {"file": f"p{payload['part']}.ts"}

    agenda = submit_agenda(
        submitter,
        retry_delay_seconds=0,
        operations=[{"name": "split", "type": "mediainfo", "payload": {}}],
    )
    exit_code = _run_worker(live_server, worker, insight, split=split, work=work)

    assert exit_code == 0
    assert AgendaProgress.objects.get(agenda=agenda).state == "succeeded"
    assert calls["split"] == 2
    generated = OperationProgress.objects.filter(agenda_progress__agenda=agenda, is_generated=True)
    assert [(op.name, op.state) for op in generated] == [("chunk-1", "succeeded")]
