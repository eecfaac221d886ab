"""The reference puller (popclient worker) against the live server's puller API.

Fills come from the on-commit nudge run in-process (POP_FILL_NUDGE=sync, unthrottled), so
no cluster is needed here. Every agenda succeeds; one whose second operation fails once is
retried at the point of failure: its first operation's handler runs only once and its
result is reused.
"""

import threading
from collections import Counter

import pytest
from django.db import connection

from accounts.services import token_issue
from agendas.models import AgendaProgress, Execution, OperationProgress
from agendas.template_services import agenda_template_create, agenda_template_run
from core.principals import SYSTEM
from popclient import PopClient
from popclient.handlers import HandlerError, HandlerRegistry, default_registry
from popclient.worker import Worker
from popsite.demo import PACKAGE_SCHEMA, PACKAGE_TEMPLATE
from tests.media import generated_clip

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_popclient_worker_runs_agendas_and_resumes_a_retry_at_the_point_of_failure(
    live_server, settings, submitter, submit_agenda, insight, worker
):
    settings.POP_FILL_NUDGE = "sync"
    # No cluster here, so no periodic fill to catch what a throttled nudge leaves behind.
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    calls: Counter = Counter()
    lock = threading.Lock()

    def probe(payload, ctx):
        with lock:
            calls["probe", payload["url"]] += 1
        return {"url": payload["url"], "size": len(payload["url"])}

    def measure(payload, ctx):
        with lock:
            calls["measure", payload["url"]] += 1
            attempt = calls["measure", payload["url"]]
        if payload["url"] == "s3://flaky" and attempt == 1:
            raise HandlerError("transient failure", code="flaky")
        return {"measured": payload["url"]}

    registry = HandlerRegistry({**default_registry()._handlers, "mediainfo": probe, "log": measure})
    plain = [
        submit_agenda(
            submitter,
            operations=[
                {"name": "probe", "type": "mediainfo", "payload": {"url": f"s3://in/{n}"}},
                {"name": "measure", "type": "log", "payload": {"url": "@<probe.out::/url>"}},
            ],
        )
        for n in range(12)
    ]
    flaky = submit_agenda(
        submitter,
        retry_delay_seconds=0,
        operations=[
            {"name": "probe", "type": "mediainfo", "payload": {"url": "s3://flaky"}},
            {"name": "measure", "type": "log", "payload": {"url": "@<probe.out::/url>"}},
        ],
    )
    token = token_issue(principal=SYSTEM, user=worker.user, name="e2e-worker").key
    client = PopClient(live_server.url, token)
    puller = Worker(
        client,
        str(insight.pk),
        registry=registry,
        name="ref-worker",
        concurrency=4,
        batch=5,
        wait_seconds=1,
        max_agendas=len(plain) + 2,  # the flaky one is pulled twice
        idle_exit_seconds=10,
    )

    exit_code = puller.run()
    client.close()
    connection.close()

    assert exit_code == 0
    states = dict(
        AgendaProgress.objects.filter(agenda__in=[*plain, flaky])
        .values_list("agenda_id", "state")
        .order_by()
    )
    assert set(states.values()) == {"succeeded"}
    assert calls["probe", "s3://flaky"] == 1  # not run again on the retry
    assert calls["measure", "s3://flaky"] == 2
    outcomes = list(
        Execution.objects.filter(agenda=flaky).order_by("number").values_list("outcome")
    )
    assert outcomes == [("failed",), ("succeeded",)]
    results = dict(
        OperationProgress.objects.filter(agenda_progress__agenda=flaky).values_list(
            "name", "result"
        )
    )
    assert results == {
        "probe": {"url": "s3://flaky", "size": 10},
        "measure": {"measured": "s3://flaky"},
    }


def _one_agenda_by_a_real_worker(live_server, worker, insight) -> int:
    """Run the reference worker with the built-in handlers for one agenda; its exit code."""
    token = token_issue(principal=SYSTEM, user=worker.user, name="e2e-media").key
    client = PopClient(live_server.url, token)
    puller = Worker(
        client,
        str(insight.pk),
        registry=default_registry(),
        name="media-worker",
        wait_seconds=1,
        max_agendas=1,
        idle_exit_seconds=10,
    )
    try:
        return puller.run()
    finally:
        client.close()
        connection.close()


def test_a_permanent_failure_fails_the_agenda_after_one_execution_with_attempts_left(
    live_server, settings, submitter, submit_agenda, insight, worker, tmp_path
):
    """Real `mediainfo` (ffprobe) on a file that is not there: PermanentError, reported as not
    retryable, and the agenda is failed at once although two attempts remain."""
    settings.POP_FILL_NUDGE = "sync"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    missing = tmp_path / "not-there.mp4"
    agenda = submit_agenda(
        submitter,
        max_attempts=3,
        retry_delay_seconds=0,
        operations=[{"name": "probe", "type": "mediainfo", "payload": {"input": str(missing)}}],
    )
    assert _one_agenda_by_a_real_worker(live_server, worker, insight) == 0

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == "failed"
    assert progress.attempts_completed == 1
    assert progress.run_after is None
    assert "not retryable" in progress.message
    assert progress.diagnostics[-1]["code"] == "not_retryable"
    assert Execution.objects.filter(agenda=agenda).count() == 1
    operation = OperationProgress.objects.get(agenda_progress=progress)
    assert (operation.state, operation.diagnostics[-1]["code"]) == ("failed", "probe_failed")


def test_the_demo_transcode_and_package_template_runs_end_to_end_on_a_real_clip(
    live_server, settings, submitter, admin_member, insight, worker, tmp_path
):
    """popsite.demo's template, real ffprobe/ffmpeg handlers: probe, transcode, thumbnail,
    and HLS + DASH packaging of a generated clip, pulled and reported over HTTP."""
    settings.POP_FILL_NUDGE = "sync"
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    clip = generated_clip(tmp_path / "clip.mp4", seconds=3, size="320x240")
    template = agenda_template_create(
        principal=admin_member.user,
        customer=admin_member.customer,
        name="transcode-and-package",
        agenda=PACKAGE_TEMPLATE,
        payload_schema=PACKAGE_SCHEMA,
    )
    out = tmp_path / "out"
    agenda, _ = agenda_template_run(
        principal=submitter.user,
        template=template,
        customer=submitter.customer,
        payload={"input": str(clip), "output_dir": str(out)},
    )
    assert _one_agenda_by_a_real_worker(live_server, worker, insight) == 0

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.state, progress.percent_complete) == ("succeeded", 100.0)
    package = OperationProgress.objects.get(agenda_progress=progress, name="package").result
    assert package["hls"] == str(out / "stream" / "hls" / "master.m3u8")
    assert package["dash"] == str(out / "stream" / "dash" / "manifest.mpd")
    assert (out / "stream" / "hls" / "master.m3u8").read_text().count("#EXT-X-STREAM-INF") == 2
    assert (out / "thumbnail.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "mezzanine.mp4").stat().st_size > 0
