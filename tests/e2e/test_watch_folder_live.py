"""`pop watch --dir` as a real process against a live server and a real trigger: a file copied
in slowly fires exactly once after it settles, a restarted watcher does not fire it again,
and 50 files dropped at once make 50 agendas."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agendas.models import Agenda
from agendas.template_services import agenda_template_create
from triggers.models import TriggerFiring
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
SETTLE_SECONDS = 1.0  # four times the pause between two chunks of the slow copy
INGEST_AGENDA = {
    "operations": [
        {"name": "announce", "type": "log", "payload": {"message": "@<pop.payload::/path>"}}
    ]
}
INGEST_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "name": {"type": "string"}},
    "required": ["path", "name"],
}


class Watcher:
    """`pop watch --dir` in a subprocess; its log in a file, shown when a test fails."""

    def __init__(self, url: str, folder: Path, trigger_id: str, secret: str, log: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith("POP_")}
        env |= {"POP_TRIGGER_SECRET": secret, "POP_CONFIG": str(log.parent / "pop.json")}
        self.log = log
        self._log_file = open(log, "a")
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "popclient", "watch", "--url", url, "--dir", str(folder),
                "--trigger", trigger_id, "--settle-seconds", str(SETTLE_SECONDS),
                "--pattern", "*.mxf",
            ],
            cwd=ROOT, env=env, stdout=self._log_file, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=10)
        finally:
            self._log_file.close()
        return code


def firings(trigger):
    return list(
        TriggerFiring.objects.filter(trigger=trigger)
        .order_by("received_at")
        .values_list("status", "event", "agenda_id")
    )


def wait_for_firings(trigger, count: int, watcher: Watcher, *, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    while True:
        seen = firings(trigger)
        if len(seen) >= count:
            return seen
        assert watcher.process.poll() is None, watcher.log.read_text()
        if time.monotonic() >= deadline:
            pytest.fail(
                f"{len(seen)} of {count} firings after {timeout:g}s:\n{watcher.log.read_text()}"
            )
        time.sleep(0.1)


def test_a_watch_folder_fires_a_slow_copy_once_not_again_after_a_restart_and_fifty_at_once(
    live_server, admin_member, insight, tmp_path
):
    template = agenda_template_create(
        principal=admin_member.user,
        customer=admin_member.customer,
        name="ingest",
        agenda=INGEST_AGENDA,
        payload_schema=INGEST_SCHEMA,
    )
    trigger = trigger_create(
        principal=admin_member.user,
        customer=admin_member.customer,
        template=template,
        name="drop-folder",
        payload_mapping={"path": "@</path>", "name": "@</name>"},
    )
    folder = tmp_path / "drop"
    folder.mkdir()
    log = tmp_path / "watch.log"

    watcher = Watcher(live_server.url, folder, str(trigger.pk), trigger.secret, log)
    try:
        with (folder / "slow.mxf").open("wb") as copy:  # 8 chunks over 2 s, longer than settle
            for _ in range(8):
                copy.write(b"x" * 64_000)
                copy.flush()
                time.sleep(0.25)
        [(status, event, agenda_id)] = wait_for_firings(trigger, 1, watcher, timeout=10)
        time.sleep(3 * SETTLE_SECONDS)  # passes enough to fire it again, were it to
        assert len(firings(trigger)) == 1
    finally:
        assert watcher.stop() == 0, log.read_text()

    assert status == "submitted"
    assert (event["name"], event["size"]) == ("slow.mxf", 8 * 64_000)
    [announce] = Agenda.objects.get(pk=agenda_id).operations
    assert announce["payload"] == {"message": str(folder / "slow.mxf")}
    state = json.loads((folder / ".pop-watch-state.json").read_text())
    assert state["files"]["slow.mxf"]["status"] == "fired"

    restarted = Watcher(live_server.url, folder, str(trigger.pk), trigger.secret, log)
    try:
        for number in range(50):
            (folder / f"clip-{number:02}.mxf").write_bytes(b"y" * (number + 1))
        wait_for_firings(trigger, 51, restarted, timeout=40)
        time.sleep(SETTLE_SECONDS)
        seen = firings(trigger)
    finally:
        assert restarted.stop() == 0, log.read_text()

    names = [event["name"] for _, event, _ in seen]
    assert names.count("slow.mxf") == 1
    assert sorted(names[1:]) == [f"clip-{number:02}.mxf" for number in range(50)]
    assert {status for status, _, _ in seen} == {"submitted"}
    assert Agenda.objects.filter(customer=admin_member.customer).count() == 51
