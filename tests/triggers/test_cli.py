"""``pop triggers`` and popclient.triggers.fire against the real server in-process (httpx's
WSGI transport): create prints the secret once, fire signs, firings lists what happened."""

import functools
import io
import json
import os
from unittest import mock

import httpx
import pytest
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections

import popclient.cli.triggers as cli_triggers
from accounts.services import token_issue
from agendas.models import Agenda
from core.principals import SYSTEM
from popclient.cli import main
from popclient.client import PopClient
from popclient.triggers import fire
from tests.triggers.sample_events import s3_event
from triggers.models import Trigger

pytestmark = pytest.mark.django_db
URL = "http://testserver"


@pytest.fixture
def transport():
    """The Django app in-process, on the test's connection (kept open, as Django's test
    Client keeps it: a finished request would otherwise close it)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield httpx.WSGITransport(app=get_wsgi_application())
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def pop(transport, admin_member, tmp_path, monkeypatch, fresh_throttles):
    token = token_issue(principal=SYSTEM, user=admin_member.user, name="cli").key
    monkeypatch.setenv("POP_CONFIG", str(tmp_path / "pop.json"))
    monkeypatch.setattr(cli_triggers, "fire", functools.partial(fire, transport=transport))

    def factory(url, token, **kwargs):
        return PopClient(url, token, transport=transport, sleep=lambda s: None, **kwargs)

    def run(*argv, env=None):
        stdout, stderr = io.StringIO(), io.StringIO()
        with mock.patch.dict(os.environ, {"POP_TOKEN": token, **(env or {})}):
            code = main(["--url", URL, *argv], client_factory=factory, stdout=stdout, stderr=stderr)
        return code, stdout.getvalue(), stderr.getvalue()

    return run


def test_fire_signs_an_event_the_server_accepts_once(trigger, transport, fresh_throttles):
    event = s3_event(sequencer="5")

    first = fire(URL, str(trigger.pk), trigger.secret, event, transport=transport)
    again = fire(URL, str(trigger.pk), trigger.secret, event, transport=transport)
    forged = fire(URL, str(trigger.pk), "guess", event, transport=transport)

    assert (first[0], first[1]["status"]) == (201, "submitted")
    assert again == (200, {**first[1], "status": "duplicate"})
    assert forged[0] == 401
    assert Agenda.objects.count() == 1


def test_pop_triggers_create_fire_and_firings(pop, template, tmp_path):
    mapping = json.dumps({"url": "@</Records/0/s3/object/key>"})
    code, out, err = pop(
        "triggers", "create", "--name", "cli-made", "--template", "ingest", "--mapping", mapping,
        "--event-id-pointer", "/Records/0/s3/object/sequencer",
    )  # fmt: skip
    assert code == 0, err
    trigger = Trigger.objects.get(name="cli-made")
    assert out.strip() == trigger.secret
    assert "cannot be shown again" in err
    secret_file = tmp_path / "secret"
    secret_file.write_text(trigger.secret + "\n")
    event = json.dumps(s3_event(key="incoming/x.mov"))

    fired = pop(
        "triggers", "fire", str(trigger.pk), "--event", event, "--secret-file", str(secret_file)
    )
    repeated = pop("--json", "triggers", "fire", str(trigger.pk), "--event", event,
                   env={"POP_TRIGGER_SECRET": trigger.secret})  # fmt: skip
    no_secret = pop("triggers", "fire", str(trigger.pk), "--event", event)
    wrong = pop(
        "triggers", "fire", str(trigger.pk), "--event", event, env={"POP_TRIGGER_SECRET": "x"}
    )
    listed = pop("--json", "triggers", "firings", str(trigger.pk))
    shown = pop("triggers", "show", str(trigger.pk))

    assert fired[0] == 0 and fired[1].startswith("submitted: firing ")
    assert repeated[0] == 0 and json.loads(repeated[1])["status"] == "duplicate"
    assert no_secret[0] == 2
    assert wrong[0] == 6
    assert [row["status"] for row in json.loads(listed[1])] == ["submitted"]
    assert shown[0] == 0 and "cli-made" in shown[1] and trigger.secret not in shown[1]
    assert Agenda.objects.get().operations[0]["payload"] == {"url": "incoming/x.mov"}


def test_fire_takes_the_key_as_pop_watch_passes_it(trigger, transport):
    watcher_fire = functools.partial(
        fire, URL, str(trigger.pk), trigger.secret, transport=transport
    )

    first = watcher_fire(s3_event(sequencer="1"), "file-a:1")
    again = watcher_fire(s3_event(sequencer="2"), "file-a:1")

    assert (first[0], again[0], again[1]["status"]) == (201, 200, "duplicate")
