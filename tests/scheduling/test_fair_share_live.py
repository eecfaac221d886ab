"""Live, on PostgreSQL with real threads: two equal customers on a `fair_share` insight, one
whose agendas hold a worker ten times longer, four pullers holding each agenda for its time
and a filler running beside them. Within 10 s each customer has had half the worker time."""

import threading
import time

import pytest
from django.db import connection
from django.db.models import F, Sum

from agendas.models import Execution
from resourcepools.models import Insight
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling import report as report_service
from tests.scheduling.conftest import clone_ready_agendas

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="live run on PostgreSQL"),
]

PULLERS = 4
RUN_SECONDS = 10.0
HOLD = {"long": 0.4, "short": 0.04}


def test_two_equal_customers_get_half_the_worker_time_each_however_long_their_work(
    submitter, other_submitter, submit_agenda, insight, worker
):
    insight.scheduling_algorithm = Insight.Algorithm.FAIR_SHARE
    insight.queue_size = 2
    insight.save()
    long_source = submit_agenda(submitter)
    short_source = submit_agenda(other_submitter)
    clone_ready_agendas(long_source, int(PULLERS * RUN_SECONDS / HOLD["long"]))
    clone_ready_agendas(short_source, int(PULLERS * RUN_SECONDS / HOLD["short"]))
    hold_of = {submitter.customer.pk: HOLD["long"], other_submitter.customer.pk: HOLD["short"]}
    deadline = time.monotonic() + RUN_SECONDS
    errors = []

    def filler():
        try:
            while time.monotonic() < deadline:
                fill_service.insight_fill(insight_id=insight.pk)
                time.sleep(0.02)
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    def puller(name):
        try:
            while time.monotonic() < deadline:
                pulled = pull_service.insight_pull(
                    principal=worker.user, insight=insight, worker=name, count=1
                )
                if not pulled:
                    time.sleep(0.005)
                    continue
                execution = pulled[0].execution
                time.sleep(hold_of[execution.customer_id])
                report_service.execution_report(
                    execution_id=execution.pk, lease_token=execution.lease_token, state="succeeded"
                )
        except BaseException as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=filler)] + [
        threading.Thread(target=puller, args=(f"w{n}",)) for n in range(PULLERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(RUN_SECONDS + 30)
    assert errors == []

    used = dict(
        Execution.objects.filter(outcome="succeeded")
        .values_list("customer_id")
        .annotate(seconds=Sum(F("ended_at") - F("started_at")))
        .values_list("customer_id", "seconds")
        .order_by()
    )
    long_seconds = used[submitter.customer.pk].total_seconds()
    short_seconds = used[other_submitter.customer.pk].total_seconds()
    share = long_seconds / (long_seconds + short_seconds)
    assert share == pytest.approx(0.5, abs=0.1), (long_seconds, short_seconds)
