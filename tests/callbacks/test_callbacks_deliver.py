"""Delivering the callback outbox to a real receiver: signing, retries, order, refusal."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import PermissionDenied

from agendas.services import agenda_abort, agenda_pause
from agendas.states import InvalidTransition
from scheduling import callbacks, report
from scheduling.callbacks import DeliveryRun, backoff, callback_redeliver, callbacks_deliver
from scheduling.models import CallbackDelivery
from tests.callbacks.conftest import SECRET
from tests.callbacks.receiver import answering

pytestmark = pytest.mark.django_db
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def _rows(agenda) -> list[CallbackDelivery]:
    return list(CallbackDelivery.objects.filter(agenda=agenda).order_by("pk"))


def test_a_callback_is_posted_once_signed_over_the_raw_body_with_the_customers_secret(
    submitter, calls_back_to, start_executing, http_receiver
):
    receiver = http_receiver()
    calls_back_to(receiver.url)
    pulled = start_executing(submitter, link_id="batch-7", external_id="ext-1")

    run = callbacks_deliver()

    assert run == DeliveryRun(delivered=1)
    [request] = receiver.requests
    assert request.path == "/hook"
    assert request.signature_verifies(SECRET)
    assert not request.signature_verifies("another-secret")
    assert request.headers["x-pop-event"] == "executing"
    assert request.headers["content-type"] == "application/json"
    [row] = _rows(pulled.agenda)
    assert request.headers["x-pop-delivery"] == str(row.pk)
    body = request.json
    assert body == {
        "event": "executing",
        "agenda_id": str(pulled.agenda.pk),
        "link_id": "batch-7",
        "external_id": "ext-1",
        "labels": {},
        "customer": "acme",
        "state": "executing",
        "processing_state": "executing",
        "percent_complete": 0.0,
        "attempts_completed": 0,
        "occurred_at": body["occurred_at"],
    }
    assert (row.status, row.attempts, row.last_status_code, row.last_error) == (
        "delivered",
        1,
        200,
        "",
    )
    assert row.delivered_at is not None
    assert callbacks_deliver() == DeliveryRun()
    assert len(receiver.requests) == 1


def test_the_agendas_callback_url_wins_over_the_customers(
    submitter, calls_back_to, submit_agenda, http_receiver
):
    customer_receiver, agenda_receiver = http_receiver(), http_receiver()
    calls_back_to(customer_receiver.url)
    agenda = submit_agenda(submitter, callback_url=agenda_receiver.url)
    agenda_pause(principal=submitter.user, agenda=agenda)

    callbacks_deliver()

    assert agenda_receiver.events() == ["paused"]
    assert customer_receiver.requests == []
    assert agenda_receiver.requests[0].signature_verifies(SECRET)


def test_500_twice_then_200_is_attempted_exactly_three_times_with_growing_delays(
    submitter, calls_back_to, submit_agenda, http_receiver
):
    receiver = http_receiver(respond=answering(500, 500))
    calls_back_to(receiver.url)
    with time_machine.travel(START, tick=True) as clock:
        agenda = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=agenda)

        assert callbacks_deliver() == DeliveryRun(retried=1)
        [row] = _rows(agenda)
        assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, 500)
        assert row.last_error == "HTTP 500"
        assert callbacks_deliver() == DeliveryRun()  # not due before its backoff
        clock.shift(backoff(1))
        assert callbacks_deliver() == DeliveryRun(retried=1)
        clock.shift(backoff(2) - timedelta(seconds=1))
        assert callbacks_deliver() == DeliveryRun()
        clock.shift(timedelta(seconds=1))
        assert callbacks_deliver() == DeliveryRun(delivered=1)

    assert receiver.events() == ["paused", "paused", "paused"]
    first, second, third = (request.at for request in receiver.requests)
    assert backoff(1) == timedelta(seconds=10) and backoff(2) == timedelta(seconds=20)
    assert 10 <= second - first < 12
    assert 20 <= third - second < 22
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status_code, row.last_error) == (
        "delivered",
        3,
        200,
        "",
    )


def _seen(receiver, agenda) -> list[str]:
    return [r.json["event"] for r in receiver.requests if r.json["agenda_id"] == str(agenda.pk)]


def _deliver_until_settled(clock, attempts: int) -> list[DeliveryRun]:
    runs = []
    for attempt in range(1, attempts + 1):
        runs.append(callbacks_deliver())
        clock.shift(backoff(attempt))
    return runs


def test_a_receiver_that_always_answers_500_ends_failed_after_8_attempts(
    submitter, calls_back_to, submit_agenda, http_receiver
):
    receiver = http_receiver(respond=lambda request: 500)
    calls_back_to(receiver.url)
    with time_machine.travel(START, tick=True) as clock:
        agenda = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=agenda)

        runs = _deliver_until_settled(clock, 9)

    assert runs == [DeliveryRun(retried=1)] * 7 + [DeliveryRun(failed=1), DeliveryRun()]
    assert len(receiver.requests) == 8
    [row] = _rows(agenda)
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 8, 500)


def test_a_receiver_that_never_answers_ends_failed_after_8_timeouts(
    settings, submitter, calls_back_to, submit_agenda, black_hole
):
    settings.POP_CALLBACK_TIMEOUT = 0.2
    calls_back_to(black_hole)
    with time_machine.travel(START, tick=True) as clock:
        agenda = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=agenda)

        runs = _deliver_until_settled(clock, 9)

    assert runs == [DeliveryRun(retried=1)] * 7 + [DeliveryRun(failed=1), DeliveryRun()]
    [row] = _rows(agenda)
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 8, None)
    assert row.last_error.startswith("timeout")


def test_events_of_one_agenda_arrive_in_order_and_a_pending_one_holds_back_the_later(
    submitter, calls_back_to, submit_agenda, http_receiver
):
    first_agenda_failed = []

    def respond(request):
        # The first event of the first agenda fails once; everything else succeeds.
        if request.json["agenda_id"] == str(slow.pk) and not first_agenda_failed:
            first_agenda_failed.append(request)
            return 503
        return 200

    receiver = http_receiver(respond=respond)
    calls_back_to(receiver.url)
    with time_machine.travel(START, tick=True) as clock:
        slow = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=slow)
        agenda_abort(principal=submitter.user, agenda=slow)
        other = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=other)
        agenda_abort(principal=submitter.user, agenda=other)

        first = callbacks_deliver()

        assert first == DeliveryRun(delivered=2, retried=1)
        assert _seen(receiver, slow) == ["paused"]  # `aborted` waits behind the pending `paused`
        assert _seen(receiver, other) == [
            "paused",
            "aborted",
        ]  # one agenda's trouble never blocks another
        assert [row.status for row in _rows(slow)] == ["pending", "pending"]

        clock.shift(backoff(1))
        assert callbacks_deliver() == DeliveryRun(delivered=2)

    assert _seen(receiver, slow) == ["paused", "paused", "aborted"]
    assert [(row.event, row.status) for row in _rows(slow)] == [
        ("paused", "delivered"),
        ("aborted", "delivered"),
    ]
    times = [r.at for r in receiver.requests if r.json["agenda_id"] == str(slow.pk)]
    assert times == sorted(times)


def test_a_callback_that_ended_failed_no_longer_holds_back_the_later_ones(
    settings, submitter, calls_back_to, submit_agenda, http_receiver
):
    settings.POP_CALLBACK_MAX_ATTEMPTS = 1
    receiver = http_receiver(respond=answering(500))
    calls_back_to(receiver.url)
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)
    agenda_abort(principal=submitter.user, agenda=agenda)

    assert callbacks_deliver() == DeliveryRun(delivered=1, failed=1)

    assert receiver.events() == ["paused", "aborted"]
    assert [(row.event, row.status) for row in _rows(agenda)] == [
        ("paused", "failed"),
        ("aborted", "delivered"),
    ]


def test_executing_and_terminal_events_are_delivered_in_the_order_they_happened(
    submitter, calls_back_to, start_executing, http_receiver
):
    receiver = http_receiver()
    calls_back_to(receiver.url)
    pulled = start_executing(submitter)
    report.execution_report(
        execution_id=pulled.execution.pk,
        lease_token=pulled.execution.lease_token,
        state="succeeded",
    )

    assert callbacks_deliver() == DeliveryRun(delivered=2)

    assert receiver.events() == ["executing", "succeeded"]
    assert receiver.requests[1].json["state"] == "succeeded"
    assert receiver.requests[1].json["processing_state"] == "complete"
    assert receiver.requests[1].json["percent_complete"] == 100.0


def test_a_private_address_is_refused_when_not_allowed_and_nothing_is_sent(
    settings, submitter, calls_back_to, submit_agenda, http_receiver
):
    settings.POP_CALLBACK_ALLOW_PRIVATE = False
    receiver = http_receiver()
    calls_back_to(receiver.url)
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)

    assert callbacks_deliver() == DeliveryRun(failed=1)

    assert receiver.requests == []
    [row] = _rows(agenda)
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 1, None)
    assert row.last_error.startswith("refused: 127.0.0.1 resolves to a non-public address")


def test_an_admin_redelivers_a_failed_callback_with_a_fresh_set_of_attempts(
    settings, submitter, admin_member, calls_back_to, submit_agenda, http_receiver
):
    settings.POP_CALLBACK_MAX_ATTEMPTS = 1
    receiver = http_receiver(respond=answering(500))
    calls_back_to(receiver.url)
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)
    callbacks_deliver()
    [row] = _rows(agenda)
    assert row.status == "failed"

    with pytest.raises(PermissionDenied):
        callback_redeliver(principal=submitter.user, delivery=row)
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("failed", 1)

    redelivered = callback_redeliver(principal=admin_member.user, delivery=row)
    assert (redelivered.status, redelivered.attempts, redelivered.last_error) == ("pending", 0, "")
    assert callbacks_deliver() == DeliveryRun(delivered=1)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 1, 200)
    assert receiver.events() == ["paused", "paused"]


def test_only_a_delivered_or_failed_callback_is_redelivered_not_a_pending_one(
    submitter, admin_member, calls_back_to, submit_agenda, http_receiver
):
    receiver = http_receiver()
    calls_back_to(receiver.url)
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)
    [row] = _rows(agenda)

    with pytest.raises(InvalidTransition) as refused:
        callback_redeliver(principal=admin_member.user, delivery=row)
    assert refused.value.current_state == "pending"
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("pending", 0)

    assert callbacks_deliver() == DeliveryRun(delivered=1)
    row.refresh_from_db()
    assert (row.status, row.last_status_code) == ("delivered", 200)
    assert row.delivered_at is not None

    again = callback_redeliver(principal=admin_member.user, delivery=row)
    assert (again.status, again.attempts, again.last_status_code, again.delivered_at) == (
        "pending",
        0,
        None,
        None,
    )
    assert callbacks_deliver() == DeliveryRun(delivered=1)
    assert receiver.events() == ["paused", "paused"]


def test_agendas_without_a_callback_url_write_no_outbox_rows(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)

    assert _rows(agenda) == []
    assert callbacks_deliver() == DeliveryRun()


def test_a_run_with_nothing_due_builds_no_http_client_and_one_with_work_builds_one(
    monkeypatch, submitter, calls_back_to, submit_agenda, http_receiver
):
    """A run every POP_CALLBACK_INTERVAL mostly finds nothing due: it must not pay for a
    client (its TLS context) it will not use; a run with work uses one client for its rows."""
    built = []
    real_new_client = callbacks.new_client

    def counting_new_client(*args, **kwargs):
        built.append(1)
        return real_new_client(*args, **kwargs)

    monkeypatch.setattr(callbacks, "new_client", counting_new_client)
    assert callbacks_deliver() == DeliveryRun()
    assert built == []

    receiver = http_receiver()
    calls_back_to(receiver.url)
    for _ in range(2):
        agenda_pause(principal=submitter.user, agenda=submit_agenda(submitter))

    assert callbacks_deliver() == DeliveryRun(delivered=2)
    assert built == [1]
    assert receiver.events() == ["paused", "paused"]
