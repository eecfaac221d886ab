"""Customer lanes (docs/design.md §6.1): woken by work becoming ready, put to sleep by the fill
when found empty, charged by what each customer was given; fair share charged by time."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agendas.models import Execution
from resourcepools.models import Customer, Insight
from scheduling.models import CustomerLane, InsightScheduleInfo, QueuedAgenda, ReadyAgenda

pytestmark = pytest.mark.django_db


def lane_of(customer, insight):
    return CustomerLane.objects.get(customer=customer, insight=insight)


def test_a_submit_wakes_its_lane_and_the_fill_puts_it_to_sleep_once_it_empties(
    submitter, submit_agenda, insight, customer, fill
):
    submit_agenda(submitter)
    assert lane_of(customer, insight).active is True

    assert fill(insight).moved == 1

    lane = lane_of(customer, insight)
    assert lane.active is False
    assert lane.served == 1.0  # one round-robin turn


def test_a_lane_with_work_left_stays_awake(submitter, submit_agenda, insight, customer, fill):
    insight.queue_size = 2
    insight.save()
    for _ in range(3):
        submit_agenda(submitter)

    fill(insight)

    assert lane_of(customer, insight).active is True
    assert ReadyAgenda.objects.count() == 1


def test_a_lane_that_wakes_again_starts_level_with_the_virtual_time_not_below_it(
    submitter, other_submitter, submit_agenda, insight, customer, other_customer, fill
):
    insight.queue_size = 100
    insight.save()
    submit_agenda(submitter)
    for _ in range(6):
        submit_agenda(other_submitter)
    fill(insight)  # customer: 1 turn then asleep; the other: 6 turns
    assert InsightScheduleInfo.objects.get(insight=insight).virtual_time == 5.0

    QueuedAgenda.objects.all().delete()  # (as if pulled)
    submit_agenda(submitter)

    # It was served once; idle time banks nothing: it starts at the last turn's level.
    assert lane_of(customer, insight).served == 5.0
    assert lane_of(customer, insight).active is True


def test_a_held_customer_gets_no_turn_and_owes_none_when_released(
    submitter, other_submitter, submit_agenda, insight, customer, other_customer, fill
):
    insight.queue_size = 4
    insight.save()
    for _ in range(4):
        submit_agenda(submitter)
        submit_agenda(other_submitter)
    customer.held = True
    customer.save()

    fill(insight)

    assert set(QueuedAgenda.objects.values_list("customer_id", flat=True)) == {other_customer.pk}
    # Moved up to the frontier: released, it does not get four turns in a row to catch up.
    assert lane_of(customer, insight).served == 3.0
    assert lane_of(customer, insight).active is True


def test_fair_share_charges_the_declared_cost_at_queue_time_and_the_real_time_at_the_end(
    submitter, submit_agenda, insight, customer, fill, pull, report
):
    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.save()
    customer.weight = 2
    customer.save()
    submit_agenda(submitter, cost=30)

    fill(insight)
    assert lane_of(customer, insight).served == pytest.approx(15.0)  # 30 s / weight 2

    [pulled] = pull(insight)
    Execution.objects.filter(pk=pulled.execution.pk).update(
        started_at=timezone.now() - timedelta(seconds=50)
    )
    report(pulled, state="succeeded")

    lane = lane_of(customer, insight)
    assert lane.served == pytest.approx(25.0, abs=0.2)  # corrected to 50 s / 2
    assert lane.mean_seconds == pytest.approx(50.0, abs=0.4)


def test_fair_share_charges_the_customers_running_mean_when_no_cost_is_declared(
    submitter, submit_agenda, insight, customer, fill
):
    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.save()
    CustomerLane.objects.create(insight=insight, customer=customer, active=False, mean_seconds=8)
    submit_agenda(submitter)

    fill(insight)

    assert lane_of(customer, insight).served == pytest.approx(8.0)


def test_fair_share_charges_a_newcomer_the_mean_of_the_lanes_read_that_have_one(
    submitter, other_submitter, submit_agenda, insight, customer, other_customer, fill
):
    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.queue_size = 100
    insight.save()
    CustomerLane.objects.create(insight=insight, customer=customer, active=False, mean_seconds=6)
    submit_agenda(submitter)
    submit_agenda(other_submitter)  # its customer has never run anything here

    fill(insight)

    newcomer = lane_of(other_customer, insight)
    assert (newcomer.served, newcomer.pending_charge) == (pytest.approx(6.0), pytest.approx(6.0))
    assert lane_of(customer, insight).served == pytest.approx(6.0)


def test_fair_share_corrects_each_second_charged_once_however_the_estimate_moved_meanwhile(
    submitter, submit_agenda, insight, customer, fill, pull, report
):
    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.save()
    submit_agenda(submitter)
    submit_agenda(submitter)
    fill(insight)  # both charged the default estimate: no execution has ended yet
    lane = lane_of(customer, insight)
    assert (lane.served, lane.pending_count, lane.pending_charge) == (20.0, 2, 20.0)
    first, second = pull(insight)
    for pulled, took in ((first, 60), (second, 30)):
        Execution.objects.filter(pk=pulled.execution.pk).update(
            started_at=timezone.now() - timedelta(seconds=took)
        )
        report(pulled, state="succeeded")

    # Charged 90 s in all, whatever the running mean was when each ended.
    lane = lane_of(customer, insight)
    assert lane.served == pytest.approx(90.0, abs=0.3)
    assert (lane.pending_count, lane.pending_charge) == (0, 0.0)


def test_fair_share_gives_back_the_charge_of_an_agenda_aborted_in_its_queue(
    submitter, submit_agenda, insight, customer, fill
):
    from agendas.services import agenda_abort

    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.save()
    agenda = submit_agenda(submitter, cost=40)
    fill(insight)
    assert lane_of(customer, insight).served == pytest.approx(40.0)

    agenda_abort(principal=submitter.user, agenda=agenda)

    lane = lane_of(customer, insight)
    assert lane.served == pytest.approx(0.0, abs=0.01)  # (the decay clock moved a little)
    assert (lane.pending_count, lane.pending_charge) == (0, 0.0)
    assert lane.mean_seconds is None  # an agenda that never ran teaches nothing


def test_charges_of_other_algorithms_are_not_touched_when_an_execution_ends(
    submitter, submit_agenda, insight, customer, fill, pull, report
):
    submit_agenda(submitter)
    fill(insight)
    [pulled] = pull(insight)

    report(pulled, state="succeeded")

    lane = lane_of(customer, insight)
    assert (lane.served, lane.mean_seconds) == (1.0, None)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own counters")
def test_a_fill_reads_a_bounded_number_of_rows_with_20000_customers_waiting(insight, pool, fill):
    from bench.common import bulk_insert_ready

    insight.queue_size = 50
    insight.save()
    tenants = Customer.objects.bulk_create(
        Customer(name=f"Tenant {n}", slug=f"tenant-{n}", resource_pool=pool) for n in range(20_000)
    )
    # One ready agenda per tenant, written as a submit writes it, and its awake lane.
    bulk_insert_ready(
        connection.settings_dict["NAME"],
        insight_id=str(insight.pk),
        customer_ids=[str(tenant.pk) for tenant in tenants],
        per_customer=1,
    )
    with connection.cursor() as cursor:
        for table in (
            "scheduling_customerlane",
            "resourcepools_customer",
            "scheduling_readyagenda",
        ):
            cursor.execute(f"ANALYZE {table}")
    with transaction.atomic(), connection.cursor() as cursor:
        before = _rows_read(cursor)
        result = fill(insight)
        after = _rows_read(cursor)

    assert result.moved == 50
    # A page of 51 lanes and the 50 rows moved (and their index entries), not 20,000 of each.
    assert after - before < 500, after - before


def _rows_read(cursor) -> int:
    total = 0
    for table in ("scheduling_customerlane", "scheduling_readyagenda"):
        cursor.execute(
            "SELECT coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) "
            "FROM pg_index i WHERE i.indrelid = %s::regclass), 0) "
            "+ pg_stat_get_xact_tuples_returned(%s::regclass)",
            [table, table],
        )
        total += int(cursor.fetchone()[0])
    return total


def test_fair_share_gives_back_every_charge_of_a_set_aborted_in_its_queue_at_once(
    submitter, submit_agenda, insight, customer, fill
):
    from agendas.bulk_actions import agenda_action_jobs_run, agenda_action_start

    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.save()
    for cost in (40, 20, 30):
        submit_agenda(submitter, cost=cost, link_id="set")
    fill(insight)
    assert lane_of(customer, insight).served == pytest.approx(90.0)
    job = agenda_action_start(
        principal=submitter.user, action="abort", selection={"filter": {"link_id": "set"}}
    )

    agenda_action_jobs_run(job_id=job.pk)

    lane = lane_of(customer, insight)
    assert lane.served == pytest.approx(0.0, abs=0.01)
    assert (lane.pending_count, lane.pending_charge) == (0, 0.0)


@pytest.mark.parametrize("batch", [False, True], ids=["one report", "a batch"])
def test_a_finishing_report_charges_fair_share_last_so_fills_skip_the_lane_only_until_commit(
    submitter, submit_agenda, insight, customer, fill, pull, batch
):
    """A fill skips a lane row another transaction holds (SKIP LOCKED): every statement a report
    sent after its charge would lengthen the time the lane loses its turns."""
    from django.test.utils import CaptureQueriesContext

    from scheduling import report as report_service

    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.save()
    submit_agenda(submitter, cost=5)
    fill(insight)
    [pulled] = pull(insight)
    item = {
        "execution": pulled.execution.pk,
        "lease_token": pulled.execution.lease_token,
        "state": "succeeded",
    }

    with CaptureQueriesContext(connection) as captured:
        if batch:
            report_service.execution_report_batch(reports=[item])
        else:
            report_service.execution_report(
                execution_id=item["execution"], lease_token=item["lease_token"], state="succeeded"
            )

    statements = [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]
    assert CustomerLane._meta.db_table in statements[-1]
    assert statements[-1].lstrip().startswith("WITH ended AS")
    assert lane_of(customer, insight).pending_count == 0
