"""Real PostgreSQL, real threads: a fill never puts a lane to sleep while a transaction that
makes one of its agendas ready is still in flight, so no ready agenda is ever stranded."""

import threading

import pytest
from django.db import connection, transaction

from agendas.services import agenda_submit
from scheduling import fill as fill_service
from scheduling.models import CustomerLane, QueuedAgenda

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]


def test_a_lane_found_empty_while_a_submit_is_in_flight_stays_awake_and_its_agenda_is_filled(
    submitter, insight, customer, operations
):
    # An awake lane with no ready agenda (its last one was just pulled, say).
    CustomerLane.objects.create(insight=insight, customer=customer, active=True)
    written, release = threading.Event(), threading.Event()
    errors = []

    def submit_and_wait():
        try:
            with transaction.atomic():
                agenda_submit(principal=submitter.user, customer=customer, operations=operations)
                written.set()  # ready row and lane lock taken, not committed
                release.wait(30)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    writer = threading.Thread(target=submit_and_wait)
    writer.start()
    assert written.wait(30)

    result = fill_service.insight_fill(insight_id=insight.pk)  # sees the lane, but no row

    assert result.moved == 0
    assert CustomerLane.objects.get(insight=insight, customer=customer).active is True
    release.set()
    writer.join(30)
    assert errors == []
    assert fill_service.insight_fill(insight_id=insight.pk).moved == 1
    assert QueuedAgenda.objects.filter(customer=customer).count() == 1


def test_a_submit_that_waits_for_a_fill_putting_its_lane_to_sleep_wakes_the_lane(
    submitter, insight, customer, operations
):
    """The fill takes the lane's lock first and sleeps it; the submit's lock waits for the
    fill's commit, then finds the lane asleep and wakes it."""
    CustomerLane.objects.create(insight=insight, customer=customer, active=True)
    holding, release = threading.Event(), threading.Event()
    errors = []

    def fill_and_wait():
        try:
            with transaction.atomic():
                from agendas import states

                assert states.lanes_sleep(insight.pk, [customer.pk]) == [customer.pk]
                holding.set()
                release.wait(30)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    filler = threading.Thread(target=fill_and_wait)
    filler.start()
    assert holding.wait(30)
    submitted = threading.Thread(
        target=lambda: (
            agenda_submit(principal=submitter.user, customer=customer, operations=operations),
            connection.close(),
        )
    )
    submitted.start()
    submitted.join(1)
    assert submitted.is_alive()  # waiting for the fill's lane lock
    release.set()
    filler.join(30)
    submitted.join(30)
    assert errors == []

    assert CustomerLane.objects.get(insight=insight, customer=customer).active is True
    assert fill_service.insight_fill(insight_id=insight.pk).moved == 1
