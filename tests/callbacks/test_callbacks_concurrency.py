"""Real PostgreSQL: a slow receiver holds no lock and blocks neither scheduling nor a rival."""

import threading
import time

import pytest
from django.db import connection, transaction

from agendas.models import AgendaProgress
from agendas.services import agenda_abort, agenda_pause
from scheduling.callbacks import DeliveryRun, callbacks_deliver
from scheduling.locks import single_flight
from scheduling.models import CallbackDelivery

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="row locks are proven on PostgreSQL"
    ),
]


def test_while_a_receiver_is_answering_the_row_is_unlocked_the_agenda_moves_on_and_a_rival_waits(
    submitter, calls_back_to, submit_agenda, http_receiver
):
    seen_during_delivery: dict[str, object] = {}

    def respond(request):
        if seen_during_delivery:
            return 200
        # Runs in the receiver's thread, on its own database connection, while the
        # deliverer waits for this answer.
        try:
            with transaction.atomic():
                row = CallbackDelivery.objects.select_for_update(nowait=True).get(event="paused")
                seen_during_delivery["row"] = (row.status, row.attempts)
            agenda_abort(principal=submitter.user, agenda=agenda)
            seen_during_delivery["state"] = AgendaProgress.objects.get(agenda=agenda).state
            seen_during_delivery["rival"] = callbacks_deliver()
        except Exception as error:  # surfaced by the assertions below
            seen_during_delivery["error"] = repr(error)
        finally:
            connection.close()
        return 200

    receiver = http_receiver(respond=respond)
    calls_back_to(receiver.url)
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)

    run = callbacks_deliver()

    assert seen_during_delivery == {
        "row": ("pending", 1),  # claimed (attempt counted) but not locked
        "state": "aborted",  # the state change committed during the delivery
        "rival": DeliveryRun(),  # leased row skipped; `aborted` held behind it
    }
    assert run == DeliveryRun(delivered=2)
    assert receiver.events() == ["paused", "aborted"]


def test_a_dead_receiver_ties_up_one_worker_at_most_the_next_runs_return_at_once(
    submitter, calls_back_to, submit_agenda, black_hole, settings
):
    from scheduling import tasks

    settings.POP_CALLBACK_BATCH_SIZE = 1  # two due rows: a rival run would find the second
    calls_back_to(black_hole)
    for _ in range(2):
        agenda_pause(principal=submitter.user, agenda=submit_agenda(submitter))
    first: list[int] = []

    def run_first():
        try:
            first.append(tasks.callbacks())
        finally:
            connection.close()

    thread = threading.Thread(target=run_first)
    thread.start()
    deadline = time.monotonic() + 5
    while not CallbackDelivery.objects.filter(attempts=1).exists():  # the first run is sending
        assert time.monotonic() < deadline
        time.sleep(0.02)

    started = time.monotonic()
    overlapping = [tasks.callbacks() for _ in range(3)]  # the next periods' copies
    returned_after = time.monotonic() - started
    thread.join(timeout=10)

    assert overlapping == [0, 0, 0]
    assert returned_after < 1.0  # they did not wait for the 2 s timeout of the dead receiver
    assert first == [2]  # the first run made both attempts, one after the other
    assert list(CallbackDelivery.objects.values_list("attempts", flat=True)) == [1, 1]
    with single_flight("callbacks") as free_again:  # released when the first run ended
        assert free_again
