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


def submit_waits_for(fill_step, submitter, customer, operations) -> None:
    """Run `fill_step` in a transaction on another connection and hold it open; submit an
    agenda meanwhile, check the submit waits for that transaction, then let both finish."""
    holding, release = threading.Event(), threading.Event()
    errors = []

    def hold():
        try:
            with transaction.atomic():
                fill_step()
                holding.set()
                release.wait(30)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def submit():
        try:
            agenda_submit(principal=submitter.user, customer=customer, operations=operations)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(30)
    submitter_thread = threading.Thread(target=submit)
    submitter_thread.start()
    submitter_thread.join(1)
    assert submitter_thread.is_alive()  # waiting for the fill's transaction
    release.set()
    holder.join(30)
    submitter_thread.join(30)
    assert errors == []


def test_a_submit_that_waits_for_a_fill_putting_its_lane_to_sleep_wakes_the_lane(
    submitter, insight, customer, operations
):
    """The fill takes the lane's lock first and sleeps it; the submit's lock waits for the
    fill's commit, then finds the lane asleep and wakes it."""
    from agendas import states

    CustomerLane.objects.create(insight=insight, customer=customer, active=True)

    def fill_sleeps_the_lane():
        assert states.lanes_sleep(insight.pk, [customer.pk]) == [customer.pk]

    submit_waits_for(fill_sleeps_the_lane, submitter, customer, operations)

    assert CustomerLane.objects.get(insight=insight, customer=customer).active is True
    assert fill_service.insight_fill(insight_id=insight.pk).moved == 1


def test_a_lane_woken_while_a_fill_is_in_flight_starts_at_the_level_that_fill_leaves(
    submitter, insight, customer, operations
):
    from scheduling.models import InsightScheduleInfo

    info = InsightScheduleInfo.objects.create(insight=insight, virtual_time=10.0)

    def fill_moves_the_virtual_time():
        locked = InsightScheduleInfo.objects.select_for_update().get(pk=info.pk)
        locked.virtual_time = 50.0
        locked.save(update_fields=["virtual_time"])

    submit_waits_for(fill_moves_the_virtual_time, submitter, customer, operations)

    assert CustomerLane.objects.get(insight=insight, customer=customer).served == 50.0
