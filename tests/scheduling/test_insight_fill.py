"""insight_fill (docs/design.md §6.1): room, caps, fairness state, positions, the try-lock."""

import threading

import pytest
from django.db import connection, transaction
from django.db.models import Count

from agendas.models import AgendaProgress
from resourcepools.models import Insight
from scheduling import fill as fill_service
from scheduling.locks import insight_fill_try_lock
from scheduling.models import CustomerLane, InsightScheduleInfo, QueuedAgenda, ReadyAgenda
from tests.factories import CustomerFactory
from tests.scheduling.conftest import progress_row_held, state_of

pytestmark = pytest.mark.django_db


def test_fill_moves_up_to_queue_size_in_priority_then_age_order(submitter, submit_agenda, insight):
    insight.queue_size = 3
    insight.save()
    low = [submit_agenda(submitter, priority=2) for _ in range(2)]
    high = [submit_agenda(submitter, priority=8) for _ in range(2)]

    result = fill_service.insight_fill(insight_id=insight.pk)

    assert (result.moved, result.room, result.skipped) == (3, 3, False)
    queued = list(QueuedAgenda.objects.order_by("position").values_list("agenda_id", "position"))
    assert [agenda_id for agenda_id, _ in queued] == [high[0].pk, high[1].pk, low[0].pk]
    assert [position for _, position in queued] == [1, 2, 3]
    assert [state_of(agenda) for agenda in (*high, low[0])] == ["queued"] * 3
    assert state_of(low[1]) == "ready"
    assert list(ReadyAgenda.objects.values_list("agenda_id", flat=True)) == [low[1].pk]
    info = InsightScheduleInfo.objects.get(insight=insight)
    assert (info.next_position, info.last_fill_count) == (4, 3)


def test_fill_of_a_full_queue_moves_nothing_and_positions_keep_counting(
    submitter, submit_agenda, insight, fill, pull
):
    insight.queue_size = 2
    insight.save()
    agendas = [submit_agenda(submitter) for _ in range(4)]
    fill(insight)

    assert fill(insight).moved == 0
    pull(insight, count=1)
    fill(insight)

    positions = dict(QueuedAgenda.objects.values_list("agenda_id", "position"))
    assert positions == {agendas[1].pk: 2, agendas[2].pk: 3}


def test_execution_limit_counts_executing_and_queued(submitter, submit_agenda, insight, fill, pull):
    insight.queue_size = 10
    insight.execution_limit = 3
    insight.save()
    for _ in range(6):
        submit_agenda(submitter)

    assert fill(insight).moved == 3
    pull(insight, count=2)
    assert fill(insight).moved == 0  # 2 executing + 1 queued = the limit
    assert QueuedAgenda.objects.count() == 1


def test_customer_at_max_executing_is_skipped_others_are_served(
    submitter, other_submitter, submit_agenda, insight, customer, fill, pull
):
    customer.max_executing = 2
    customer.save()
    mine = [submit_agenda(submitter) for _ in range(4)]
    theirs = [submit_agenda(other_submitter) for _ in range(4)]

    fill(insight)
    pull(insight, count=10)
    fill(insight)

    executing = set(
        AgendaProgress.objects.filter(state__in=["executing", "queued"]).values_list(
            "agenda_id", flat=True
        )
    )
    assert len(executing & {agenda.pk for agenda in mine}) == 2
    assert {agenda.pk for agenda in theirs} <= executing


def test_round_robin_turns_are_kept_in_the_lanes_between_fills(
    make_principal, submit_agenda, insight, pool
):
    customers = [CustomerFactory(slug=slug, resource_pool=pool) for slug in ("a", "b", "c")]
    principals = [make_principal(customer) for customer in customers]
    for principal in principals:
        submit_agenda(principal)
    insight.queue_size = 2
    insight.save()

    fill_service.insight_fill(insight_id=insight.pk)
    info = InsightScheduleInfo.objects.get(insight=insight)
    ordered = sorted(customers, key=lambda customer: str(customer.pk))
    queued_customers = list(
        QueuedAgenda.objects.order_by("position").values_list("customer_id", flat=True)
    )
    assert queued_customers == [ordered[0].pk, ordered[1].pk]
    served = dict(CustomerLane.objects.values_list("customer_id", "served"))
    assert served == {ordered[0].pk: 1.0, ordered[1].pk: 1.0, ordered[2].pk: 0.0}
    assert info.virtual_time == 0.0

    for principal in principals:
        submit_agenda(principal)
    QueuedAgenda.objects.all().delete()  # (as if pulled) room for two more
    fill_service.insight_fill(insight_id=insight.pk)

    # The customer still owed its first turn is served before anyone gets a second.
    queued = list(QueuedAgenda.objects.order_by("position").values_list("customer_id", flat=True))
    assert queued == [ordered[2].pk, ordered[0].pk]


def test_a_second_filler_skips_while_the_first_holds_the_lock(insight):
    if connection.vendor != "postgresql":
        pytest.skip("advisory locks are PostgreSQL's")
    results = []

    def rival():
        try:
            results.append(fill_service.insight_fill(insight_id=insight.pk))
        finally:
            connection.close()

    with transaction.atomic():
        assert insight_fill_try_lock(insight.pk) is True
        thread = threading.Thread(target=rival)
        thread.start()
        thread.join()

    assert results[0].skipped is True
    assert results[0].moved == 0


def test_fill_of_every_insight_fills_those_with_room_and_work(
    submitter, submit_agenda, insight, transcode_insight
):
    submit_agenda(submitter)
    submit_agenda(submitter, operations=[{"name": "t", "type": "transcode"}])

    assert fill_service.insights_fill() == 2
    assert set(QueuedAgenda.objects.values_list("insight_id", flat=True)) == {
        insight.pk,
        transcode_insight.pk,
    }
    assert Insight.objects.count() == 2


def test_fill_reads_more_of_a_customer_the_picker_emptied_until_the_room_is_met(
    submitter, other_submitter, make_principal, submit_agenda, insight, pool, fill
):
    third = make_principal(CustomerFactory(slug="third", resource_pool=pool))
    insight.queue_size = 10
    insight.save()
    for _ in range(12):
        submit_agenda(submitter)
    submit_agenda(other_submitter)
    submit_agenda(third)

    assert fill(insight).moved == 10  # 1 + 1 + 8: the first read took only 5 of the flood's
    counts = dict(
        QueuedAgenda.objects.values_list("customer__slug").annotate(n=Count("pk")).order_by()
    )
    assert counts == {"acme": 8, "globex": 1, "third": 1}


def test_weighted_fair_fill_shares_the_room_by_weight_and_charges_the_lanes(
    submitter, other_submitter, submit_agenda, insight, customer, fill
):
    customer.weight = 3
    customer.save()
    insight.scheduling_algorithm = Insight.Algorithm.WEIGHTED_FAIR
    insight.queue_size = 8
    insight.save()
    for _ in range(10):
        submit_agenda(submitter)
        submit_agenda(other_submitter)

    assert fill(insight).moved == 8

    counts = dict(
        QueuedAgenda.objects.values_list("customer__slug").annotate(n=Count("pk")).order_by()
    )
    assert counts == {"acme": 6, "globex": 2}
    served = dict(CustomerLane.objects.values_list("customer__slug", "served"))
    assert served == {"acme": pytest.approx(2.0), "globex": pytest.approx(2.0)}


def test_fifo_fill_takes_the_oldest_even_past_the_first_rows_read(
    submitter, other_submitter, submit_agenda, insight, fill
):
    insight.scheduling_algorithm = Insight.Algorithm.FIFO
    insight.queue_size = 6
    insight.save()
    older = [submit_agenda(submitter) for _ in range(6)]
    for _ in range(6):
        submit_agenda(other_submitter)

    assert fill(insight).moved == 6

    assert set(QueuedAgenda.objects.values_list("agenda_id", flat=True)) == {
        agenda.pk for agenda in older
    }


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SKIP LOCKED is PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_a_fill_leaves_an_agenda_whose_progress_row_another_transaction_holds_ready(
    submitter, submit_agenda, insight
):
    first, held, last = (submit_agenda(submitter) for _ in range(3))
    with progress_row_held(held):
        result = fill_service.insight_fill(insight_id=insight.pk)

    assert result.moved == 2
    # The two it moved take consecutive positions in the fill's order; the held one is untouched.
    queued = list(QueuedAgenda.objects.order_by("position").values_list("agenda_id", "position"))
    assert queued == [(first.pk, 1), (last.pk, 2)]
    assert [state_of(agenda) for agenda in (first, held, last)] == ["queued", "ready", "queued"]
    assert list(ReadyAgenda.objects.values_list("agenda_id", flat=True)) == [held.pk]
    assert fill_service.insight_fill(insight_id=insight.pk).moved == 1  # the next fill takes it
    assert QueuedAgenda.objects.get(agenda_id=held.pk).position == 3


def test_a_fill_of_an_insight_deleted_since_its_nudge_moves_nothing_and_writes_nothing(insight):
    insight_id = insight.pk
    insight.delete()

    result = fill_service.insight_fill(insight_id=insight_id)

    assert (result.moved, result.skipped) == (0, False)
    assert not InsightScheduleInfo.objects.filter(insight_id=insight_id).exists()


def test_an_insights_first_fill_makes_its_schedule_info_and_counts_what_is_queued(
    submitter, submit_agenda, insight
):
    insight.queue_size = 3
    insight.save(update_fields=["queue_size"])
    for _ in range(5):
        submit_agenda(submitter)
    assert fill_service.insight_fill(insight_id=insight.pk).moved == 3
    InsightScheduleInfo.objects.filter(insight=insight).delete()  # as before any fill

    again = fill_service.insight_fill(insight_id=insight.pk)

    # Made afresh; the three already queued leave no room, so nothing moved.
    assert (again.moved, again.room) == (0, 0)
    assert InsightScheduleInfo.objects.filter(insight=insight).count() == 1
    assert QueuedAgenda.objects.filter(insight=insight).count() == 3
