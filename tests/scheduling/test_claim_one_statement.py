"""The pull claim (agendas/states/claim.py `queue_claim`): one statement on PostgreSQL, the same
answer and the same side effects as the portable form, and the nudges a claim sends."""

from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas import states
from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.states.operation_rows import PULLED_OPERATION_ATTNAMES
from scheduling import pull as pull_service
from scheduling.models import CallbackDelivery, QueuedAgenda
from tests.scheduling.conftest import progress_row_held, state_of

pytestmark = pytest.mark.django_db

on_postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the one-statement claim is PostgreSQL's"
)


def _statements(captured) -> list[str]:
    return [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


@on_postgresql
def test_a_pull_is_one_claim_statement_that_also_reads_the_operations(
    submitter, submit_agenda, insight, fill
):
    agendas = [submit_agenda(submitter, link_id=f"L{n}", params={"n": n}) for n in range(3)]
    fill(insight)
    first = OperationProgress.objects.filter(agenda_progress__agenda=agendas[0]).order_by(
        "position"
    )
    first.filter(position=0).update(
        message='carried ü " \\ \n',
        percent_complete=100 / 3,
        result={"frames": 3, "nested": [None, 1.5]},
        params={"resume": 7},
    )

    with CaptureQueriesContext(connection) as captured:
        pulled = pull_service.insight_pull_once(insight=insight, worker="w1", count=10)
        # Everything the answer and the callbacks read was loaded by the claim itself.
        for item in pulled:
            assert item.agenda.customer.slug == submitter.customer.slug
            assert item.progress.current_execution is item.execution
            assert item.operations and item.operations_to_run == item.agenda.operations

    statements = _statements(captured)
    assert len(statements) == 1, statements
    [claim] = statements
    assert claim.lstrip().startswith("WITH") and "SKIP LOCKED" in claim
    assert "DELETE FROM" in claim and "INSERT INTO" in claim and "UPDATE" in claim
    assert '"agendas_operationprogress"' in claim
    # The rows the claim returned are the rows as stored, field by field, in queue order.
    assert [item.agenda.pk for item in pulled] == [agenda.pk for agenda in agendas]
    for item in pulled:
        assert _fields(item.progress) == _fields(AgendaProgress.objects.get(pk=item.progress.pk))
        assert _fields(item.execution) == _fields(Execution.objects.get(pk=item.execution.pk))
        assert _fields(item.agenda) == _fields(Agenda.objects.get(pk=item.agenda.pk))
        stored = OperationProgress.objects.filter(agenda_progress_id=item.progress.pk).order_by(
            "position"
        )
        assert [_pulled_fields(operation) for operation in item.operations] == [
            _pulled_fields(operation) for operation in stored
        ]
    carried = pulled[0].operations[0]
    assert (carried.message, carried.percent_complete) == ('carried ü " \\ \n', 100 / 3)
    assert carried.result == {"frames": 3, "nested": [None, 1.5]}


def _pulled_fields(operation) -> dict:
    return {name: getattr(operation, name) for name in sorted(PULLED_OPERATION_ATTNAMES)}


def test_claim_writes_leases_progress_and_returns_queue_order(
    submitter, submit_agenda, insight, fill
):
    agendas = [submit_agenda(submitter) for _ in range(3)]
    fill(insight)

    with time_machine.travel(timezone.now(), tick=False):
        now = timezone.now()
        with transaction.atomic():
            claimed = states.queue_claim(insight=insight, count=2, worker="pod-7", now=now)

    assert [progress.agenda_id for progress, _ in claimed] == [a.pk for a in agendas[:2]]
    for progress, execution in claimed:
        stored = AgendaProgress.objects.get(pk=progress.pk)
        assert (stored.state, stored.current_execution_id) == ("executing", execution.pk)
        assert (stored.started_at, stored.message) == (now, "executing on pod-7")
        assert (progress.state, progress.current_execution_id) == ("executing", execution.pk)
        assert progress.agenda.customer.slug == submitter.customer.slug
        row = Execution.objects.get(pk=execution.pk)
        assert row.lease_token == execution.lease_token
        assert (row.number, row.worker, row.insight_id) == (1, "pod-7", insight.pk)
        assert row.lease_expires_at == now + timedelta(seconds=insight.lease_seconds)
        assert (row.started_at, row.outcome, row.diagnostics) == (now, None, [])
    assert len({execution.lease_token for _, execution in claimed}) == 2
    assert list(QueuedAgenda.objects.values_list("agenda_id", flat=True)) == [agendas[2].pk]
    assert state_of(agendas[2]) == "queued"


def test_claim_keeps_the_first_start_time_of_a_retried_agenda(
    submitter, submit_agenda, insight, fill
):
    agenda = submit_agenda(submitter)
    fill(insight)
    earlier = timezone.now() - timedelta(hours=1)
    AgendaProgress.objects.filter(agenda=agenda).update(started_at=earlier)

    with transaction.atomic():
        [(progress, _)] = states.queue_claim(
            insight=insight, count=1, worker="", now=timezone.now()
        )

    stored = AgendaProgress.objects.get(agenda=agenda)
    assert (stored.started_at, stored.message) == (earlier, "executing")
    assert progress.started_at == earlier


def test_claim_numbers_each_execution_one_after_the_agendas_last_across_reruns(
    submitter, submit_agenda, insight, fill, pull, report
):
    from agendas.services import agenda_rerun

    agenda = submit_agenda(submitter)
    numbers = []
    for _ in range(3):
        fill(insight)
        [pulled] = pull(insight)
        numbers.append(pulled.execution.number)
        assert pulled.progress.last_execution_number == pulled.execution.number
        report(pulled, state="succeeded")
        agenda_rerun(principal=submitter.user, agenda=agenda)  # attempts start again at 1

    assert numbers == [1, 2, 3]
    assert AgendaProgress.objects.get(agenda=agenda).last_execution_number == 3


def test_claim_numbers_from_the_progress_row_not_from_the_executions_left(
    submitter, submit_agenda, insight, fill, pull
):
    agenda = submit_agenda(submitter)
    # An agenda whose executions 1–6 ran before (and were pruned) numbers its next one 7.
    AgendaProgress.objects.filter(agenda=agenda).update(last_execution_number=6)
    fill(insight)

    [pulled] = pull(insight)

    assert pulled.execution.number == 7
    assert AgendaProgress.objects.get(agenda=agenda).last_execution_number == 7


def test_the_portable_claim_numbers_executions_as_the_statement_does(
    submitter, submit_agenda, insight
):
    from agendas.states.claim import executions_start

    agenda = submit_agenda(submitter)
    AgendaProgress.objects.filter(agenda=agenda).update(state="queued", last_execution_number=4)
    with transaction.atomic():
        progress = AgendaProgress.objects.select_for_update().get(agenda=agenda)
        [execution] = executions_start(
            progresses=[progress], insight=insight, worker="w1", now=timezone.now()
        )

    assert (execution.number, progress.last_execution_number) == (5, 5)
    stored = AgendaProgress.objects.get(agenda=agenda)
    assert (stored.state, stored.last_execution_number) == ("executing", 5)


@pytest.fixture
def ran_once_and_rerun(submitter, submit_agenda, insight, fill, pull, report):
    """An agenda whose execution 1 ended and that was rerun, its progress row as one written
    before agendas 0028 reads (no number kept)."""
    from agendas.services import agenda_rerun

    agenda = submit_agenda(submitter)
    fill(insight)
    [first] = pull(insight)
    report(first, state="succeeded")
    agenda_rerun(principal=submitter.user, agenda=agenda)
    AgendaProgress.objects.filter(agenda=agenda).update(last_execution_number=None)
    return agenda


def test_an_agenda_older_than_the_column_is_numbered_from_its_executions_once(
    ran_once_and_rerun, insight, fill, pull
):
    agenda = ran_once_and_rerun
    fill(insight)

    [second] = pull(insight)

    assert second.execution.number == 2
    assert AgendaProgress.objects.get(agenda=agenda).last_execution_number == 2


def test_the_portable_claim_numbers_an_older_agenda_from_its_executions(
    ran_once_and_rerun, insight
):
    from agendas.states.claim import executions_start

    agenda = ran_once_and_rerun
    AgendaProgress.objects.filter(agenda=agenda).update(state="queued")
    with transaction.atomic():
        progress = AgendaProgress.objects.select_for_update().get(agenda=agenda)
        [execution] = executions_start(
            progresses=[progress], insight=insight, worker="w1", now=timezone.now()
        )

    assert (execution.number, progress.last_execution_number) == (2, 2)
    assert AgendaProgress.objects.get(agenda=agenda).last_execution_number == 2


def test_claim_writes_the_executing_callback_row(settings, submitter, submit_agenda, insight, fill):
    customer = submitter.customer
    customer.callback_url = "https://hooks.example/pop"
    customer.save(update_fields=["callback_url"])
    agenda = submit_agenda(submitter)
    fill(insight)

    [pulled] = pull_service.insight_pull_once(insight=insight, worker="w1", count=1)

    [row] = CallbackDelivery.objects.filter(agenda=agenda, event="executing")
    assert row.url == "https://hooks.example/pop"
    assert row.body["state"] == "executing"
    assert row.body["agenda_id"] == str(agenda.pk)
    assert pulled.progress.state == "executing"


@on_postgresql
@pytest.mark.django_db(transaction=True)
def test_claim_skips_an_agenda_whose_progress_row_another_transaction_holds(
    submitter, submit_agenda, insight, fill
):
    held, free = submit_agenda(submitter), submit_agenda(submitter)
    fill(insight)
    with progress_row_held(held):
        pulled = pull_service.insight_pull_once(insight=insight, worker="w1", count=10)

    assert [item.agenda.pk for item in pulled] == [free.pk]
    assert state_of(held) == "queued"
    assert list(QueuedAgenda.objects.values_list("agenda_id", flat=True)) == [held.pk]
    [again] = pull_service.insight_pull_once(insight=insight, worker="w1", count=10)
    assert again.agenda.pk == held.pk


@on_postgresql
def test_a_claim_reads_no_execution_by_postgresqls_own_counters(
    submitter, submit_agenda, insight, fill, pull, report
):
    from agendas.services import agenda_rerun

    agenda = submit_agenda(submitter)
    for _ in range(3):  # executions of other agendas and of this one's earlier runs
        submit_agenda(submitter)
    fill(insight)
    for item in pull(insight):
        report(item, state="succeeded")
    agenda_rerun(principal=submitter.user, agenda=agenda)
    fill(insight)

    before = _execution_scans()
    [claimed] = pull_service.insight_pull_once(insight=insight, worker="w1", count=10)

    assert claimed.execution.number == 2
    assert _execution_scans() == before


def _execution_scans() -> tuple[int, int]:
    """The scans of the executions table in this (the test's) transaction so far: PostgreSQL's
    own counters, pg_stat_xact_*, which need no flush."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT seq_scan, coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables "
            "WHERE relname = %s",
            [Execution._meta.db_table],
        )
        return cursor.fetchone()
