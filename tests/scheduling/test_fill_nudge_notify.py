"""Fill nudges over LISTEN/NOTIFY (POP_FILL_NUDGE=notify): a nudge is a notification, no task
row; the ticker's wait fills each nudged insight once as the nudges arrive."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from django_q.models import OrmQ

from agendas import fill_nudge
from agendas.models import AgendaProgress
from agendas.queue_models import PendingFillNudge
from scheduling import fill_listener, tasks
from scheduling.models import QueuedAgenda
from tests.scheduling.conftest import state_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY"),
]


@pytest.fixture(autouse=True)
def _notify_mode(settings):
    settings.POP_FILL_NUDGE = "notify"
    fill_nudge._last_nudge.clear()
    fill_listener._filled_at.clear()
    fill_listener._due.clear()
    yield
    fill_nudge._last_nudge.clear()
    fill_listener._filled_at.clear()
    fill_listener._due.clear()
    fill_listener._listening_on = None


def test_a_submit_notifies_instead_of_enqueuing_and_the_wait_fills_its_insight(
    submitter, submit_agenda, insight
):
    fill_listener._listening_connection()  # the ticker listens before the nudge is sent

    agenda = submit_agenda(submitter)

    assert OrmQ.objects.count() == 0  # no task row
    assert PendingFillNudge.objects.count() == 0
    assert state_of(agenda) == AgendaProgress.State.READY
    started = time.monotonic()
    fills = fill_listener.fill_nudged_until(time.time() + 5)
    assert fills == 1
    assert state_of(agenda) == AgendaProgress.State.QUEUED
    # It kept listening until the deadline: a wait is a wait, not a poll that returns early.
    assert time.monotonic() - started >= 4.5


def test_nudges_of_one_insight_sent_together_are_one_fill(settings, submitter, submit_agenda):
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0  # every submit sends its own notification
    fill_listener._listening_connection()
    agendas = [submit_agenda(submitter) for _ in range(3)]

    fills = fill_listener.fill_nudged_until(time.time() + 0.5)

    assert fills == 1
    assert {state_of(agenda) for agenda in agendas} == {AgendaProgress.State.QUEUED}


def test_a_nudge_from_another_connection_wakes_the_wait_at_once(
    settings, submitter, submit_agenda, insight
):
    settings.POP_FILL_NUDGE = "off"
    agenda = submit_agenda(submitter)  # ready, and no nudge sent
    settings.POP_FILL_NUDGE = "notify"
    fill_listener._listening_connection()

    sent = []

    def nudge_from_another_connection():
        time.sleep(0.3)
        try:
            sent.append(timezone.now())
            fill_nudge.fill_nudge([insight.pk])  # no transaction: sent at once
        finally:
            connection.close()

    sender = threading.Thread(target=nudge_from_another_connection)
    sender.start()
    fills = fill_listener.fill_nudged_until(time.time() + 1.5)
    sender.join()

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert fills == 1
    assert progress.state == AgendaProgress.State.QUEUED
    # Queued as the nudge arrived, well before the wait's end 1.2 s later.
    assert timedelta(0) <= progress.updated_at - sent[0] < timedelta(seconds=1.0)


def test_a_payload_that_is_no_insight_id_is_skipped_and_logged(submitter, submit_agenda, caplog):
    fill_listener._listening_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [fill_nudge.FILL_NUDGE_CHANNEL, "x'; --"])
    queued_before = QueuedAgenda.objects.count()

    fills = fill_listener.fill_nudged_until(time.time() + 0.3)

    assert fills == 0
    assert QueuedAgenda.objects.count() == queued_before
    assert "no insight id" in caplog.text


def test_without_the_notify_mode_the_wait_only_sleeps(settings, submitter, submit_agenda):
    settings.POP_FILL_NUDGE = "off"
    agenda = submit_agenda(submitter)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, %s)",
            [fill_nudge.FILL_NUDGE_CHANNEL, str(agenda.insight_id)],
        )

    fills = fill_listener.fill_nudged_until(time.time() + 0.2)

    assert fills == 0
    assert state_of(agenda) == AgendaProgress.State.READY


def test_the_ticker_fills_an_insight_nudged_between_its_ticks(
    settings, submitter, submit_agenda, insight
):
    settings.POP_TICKER_LINK_SECONDS = 2.0
    settings.POP_FILL_INTERVAL = 60.0  # the periodic fill runs once, at the link's start
    submitted = []

    def submit_while_the_ticker_waits():
        time.sleep(0.5)
        try:
            agenda = submit_agenda(submitter)
            submitted.append((agenda, timezone.now()))
        finally:
            connection.close()

    submitter_thread = threading.Thread(target=submit_while_the_ticker_waits)
    submitter_thread.start()
    assert tasks.ticker() == "renewed"
    submitter_thread.join()

    [(agenda, at)] = submitted
    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == AgendaProgress.State.QUEUED
    # Filled within the link that heard the nudge, not at the next periodic fill (60 s).
    assert progress.updated_at - at < timedelta(seconds=1.2)


def test_a_lost_connection_ends_the_wait_quietly_and_the_next_one_listens_again(
    submitter, submit_agenda, insight, caplog
):
    fill_listener._listening_connection()
    connection.connection.close()  # the server went away under the listening session
    started = time.monotonic()

    fills = fill_listener.fill_nudged_until(time.time() + 0.3)

    assert fills == 0
    assert time.monotonic() - started >= 0.25  # it still waited, as a sleep would
    assert "not listening until the next tick" in caplog.text
    fill_listener._listening_connection()  # a new session, listening again
    agenda = submit_agenda(submitter)
    assert fill_listener.fill_nudged_until(time.time() + 0.3) == 1
    assert state_of(agenda) == AgendaProgress.State.QUEUED


def test_a_nudge_inside_the_listen_interval_is_filled_at_its_end_not_dropped(
    settings, submitter, submit_agenda, insight
):
    settings.POP_FILL_LISTEN_INTERVAL = 2.0
    settings.POP_FILL_NUDGE_MIN_INTERVAL = 0
    fill_listener._listening_connection()
    first = submit_agenda(submitter)
    assert fill_listener.fill_nudged_until(time.time() + 0.1) == 1  # filled at once
    filled = AgendaProgress.objects.get(agenda=first).updated_at
    second = submit_agenda(submitter)  # nudged inside the 2 s window

    assert fill_listener.fill_nudged_until(time.time() + 0.3) == 0  # still inside it
    assert state_of(second) == AgendaProgress.State.READY
    assert fill_listener.fill_nudged_until(time.time() + 2.5) == 1  # at its end
    progress = AgendaProgress.objects.get(agenda=second)
    assert progress.state == AgendaProgress.State.QUEUED
    assert timedelta(seconds=1.9) <= progress.updated_at - filled < timedelta(seconds=3.0)
