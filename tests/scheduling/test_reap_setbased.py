"""The reaper deletes set-based (docs/design.md §8.5): one statement a batch whatever its size,
two when nothing expired whatever the number of customers; every row under a reaped agenda
goes, nothing of an agenda that is young, not terminal, or another customer's with a longer TTL
is touched; an agenda whose progress row is locked is left for the next reap.
"""

import re
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas.dependency_models import AgendaDependency, AgendaWait
from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from agendas.services import agenda_abort, agenda_pause
from agendas.states.reap import AGENDA_HISTORY_LINKS, AGENDA_SIDE_ROWS, reap_statement
from resourcepools.models import Customer
from scheduling import timed
from scheduling.models import CallbackDelivery, QueuedAgenda, ReadyAgenda

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the set-based statements are PostgreSQL's"
)

PLAN = [  # the tables a batch deletes from, children before parents
    "agendas_agendawait",
    "agendas_agendadependency",  # as the waiter
    "agendas_agendadependency",  # as the upstream
    "scheduling_readyagenda",
    "scheduling_queuedagenda",
    "scheduling_callbackdelivery",
    "agendas_operationprogress",
    "agendas_agendaprogress",
    "agendas_execution",  # … and nulls other progress rows' current_execution on them
    "agendas_agenda",
]
OLD = timedelta(days=45)  # past the default TTL (30 days), within 60


def _reap_orm(*, now=None, batch_size=None):
    """The portable path (what the SQLite demo runs), here on the same database."""
    return timed._reap_orm(now=now or timezone.now(), batch_size=batch_size or 1000)


@pytest.fixture
def finish(submit_agenda, insight, fill, pull, report):
    """Submit as `principal` and bring the agenda to `state` through the services: aborted
    while waiting, otherwise run by a worker (`failures` failed attempts first)."""

    def run(principal, state: str = "succeeded", failures: int = 0, **options):
        options.setdefault("max_attempts", failures + 1)
        agenda = submit_agenda(principal, retry_delay_seconds=0, **options)
        if state == "aborted":
            agenda_abort(principal=principal.user, agenda=agenda)
            return agenda
        for attempt in range(failures + 1):
            fill(insight)
            [item] = [item for item in pull(insight) if item.agenda.pk == agenda.pk]
            report(item, state="failed" if attempt < failures else state)
        assert AgendaProgress.objects.get(agenda=agenda).state == state
        return agenda

    return run


def rows_under(agenda_ids) -> dict[str, list[dict]]:
    """Every row that belongs to these agendas, table by table, as stored."""
    ids = list(agenda_ids)
    sets = {
        Agenda: Agenda.objects.filter(pk__in=ids),
        AgendaProgress: AgendaProgress.objects.filter(agenda_id__in=ids),
        OperationProgress: OperationProgress.objects.filter(agenda_progress__agenda_id__in=ids),
        Execution: Execution.objects.filter(agenda_id__in=ids),
        CallbackDelivery: CallbackDelivery.objects.filter(agenda_id__in=ids),
        ReadyAgenda: ReadyAgenda.objects.filter(agenda_id__in=ids),
        QueuedAgenda: QueuedAgenda.objects.filter(agenda_id__in=ids),
    }
    return {
        model._meta.db_table: list(rows.order_by("pk").values()) for model, rows in sets.items()
    }


def clone_terminal_agendas(source: Agenda, copies: int) -> list:
    """Copy a terminal agenda (run through the services) `copies` times, in SQL: its agenda,
    progress (pointing at the copy of its current execution), operation, execution and
    callback rows, with fresh ids. Only for batches too big to run one by one in a test.
    PostgreSQL only. Returns the copies' ids."""
    quote = connection.ops.quote_name

    def columns(model, overrides: dict[str, str], skip: tuple[str, ...] = ()) -> tuple[str, str]:
        names = [f.column for f in model._meta.concrete_fields if f.column not in skip]
        return (
            ", ".join(quote(name) for name in names),
            ", ".join(overrides.get(name, f"s.{quote(name)}") for name in names),
        )

    def copy(model, overrides: dict[str, str], source_sql: str, params, skip=()) -> None:
        cols, values = columns(model, overrides, skip)
        cursor.execute(
            f"INSERT INTO {quote(model._meta.db_table)} ({cols}) SELECT {values} {source_sql}",
            params,
        )

    progress = AgendaProgress.objects.get(agenda=source)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE pop_clones AS SELECT gen_random_uuid() AS agenda_id, "
            "gen_random_uuid() AS progress_id, n FROM generate_series(1, %s) AS n",
            [copies],
        )
        cursor.execute(
            "CREATE TEMP TABLE pop_clone_executions AS SELECT c.n, e.id AS source_id, "
            "gen_random_uuid() AS id FROM pop_clones c, agendas_execution e WHERE e.agenda_id = %s",
            [source.pk],
        )
        copy(
            Agenda,
            {"id": "c.agenda_id", "idempotency_key": "''"},
            "FROM pop_clones c, agendas_agenda s WHERE s.id = %s",
            [source.pk],
        )
        copy(
            Execution,
            {"id": "x.id", "agenda_id": "c.agenda_id", "lease_token": "gen_random_uuid()"},
            "FROM pop_clone_executions x JOIN pop_clones c ON c.n = x.n "
            "JOIN agendas_execution s ON s.id = x.source_id",
            [],
        )
        copy(
            AgendaProgress,
            {
                "id": "c.progress_id",
                "agenda_id": "c.agenda_id",
                "current_execution_id": "(SELECT x.id FROM pop_clone_executions x "
                "WHERE x.n = c.n AND x.source_id = s.current_execution_id)",
            },
            "FROM pop_clones c, agendas_agendaprogress s WHERE s.id = %s",
            [progress.pk],
        )
        copy(
            OperationProgress,
            {"id": "gen_random_uuid()", "agenda_progress_id": "c.progress_id"},
            "FROM pop_clones c, agendas_operationprogress s WHERE s.agenda_progress_id = %s",
            [progress.pk],
        )
        copy(
            CallbackDelivery,
            {"agenda_id": "c.agenda_id"},
            "FROM pop_clones c, scheduling_callbackdelivery s WHERE s.agenda_id = %s",
            [source.pk],
            skip=("id",),
        )
        cursor.execute("SELECT agenda_id FROM pop_clones ORDER BY n")
        ids = [row[0] for row in cursor.fetchall()]
        cursor.execute("DROP TABLE pop_clones, pop_clone_executions")
    return ids


def _statements(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in captured.captured_queries]


def _deleted_tables(statement: str) -> list[str]:
    return re.findall(r'DELETE FROM "(\w+)"', statement)


# --- what goes and what stays -----------------------------------------------------------------


@pytest.mark.parametrize("reap", [timed.agendas_reap, _reap_orm], ids=["sql", "orm"])
def test_a_reap_deletes_every_row_of_expired_agendas_and_touches_nothing_else(
    reap, submitter, other_submitter, finish, submit_agenda, insight, fill, pull, report
):
    other_submitter.customer.data_ttl_days = 60
    other_submitter.customer.save()
    with time_machine.travel(timezone.now() - OLD, tick=False):
        expired = [
            finish(submitter, callback_url="https://h.example/cb"),
            finish(submitter, "succeeded", failures=1),  # two executions
            finish(submitter, "failed"),
            finish(submitter, "aborted"),
        ]
        theirs = finish(other_submitter)  # as old, but their TTL is 60 days
        waiting = submit_agenda(submitter)
        held = submit_agenda(submitter, do_not_run=True)
        executing = submit_agenda(submitter)
        paused = submit_agenda(submitter)
        agenda_pause(principal=submitter.user, agenda=paused)
        fill(insight)
        pull(insight, count=10)
    young = finish(submitter, callback_url="https://h.example/cb")
    kept = [theirs, waiting, held, executing, paused, young]
    before = rows_under(agenda.pk for agenda in kept)
    gone = rows_under(agenda.pk for agenda in expired)
    assert all(gone[table] for table in ("agendas_execution", "scheduling_callbackdelivery"))

    assert reap() == len(expired)

    assert rows_under(agenda.pk for agenda in expired) == {table: [] for table in gone}
    assert rows_under(agenda.pk for agenda in kept) == before
    assert reap() == 0


@postgres_only
def test_a_batch_deletes_from_every_table_under_an_agenda_in_one_statement():
    batch = reap_statement()

    assert batch.count("FOR UPDATE OF p SKIP LOCKED") == 1
    assert _deleted_tables(batch) == PLAN
    # A progress row points only at its own agenda's executions, deleted with it: never nulled.
    assert 'SET "current_execution_id" = NULL' not in batch


# --- statement counts --------------------------------------------------------------------------


@postgres_only
def test_a_batch_of_10_and_one_of_200_agendas_cost_the_same_statements(submitter, finish):
    long_ago = timezone.now() - OLD
    with time_machine.travel(long_ago, tick=False):
        small = finish(submitter, callback_url="https://h.example/cb")
    clone_terminal_agendas(small, 9)
    with CaptureQueriesContext(connection) as ten:
        assert timed.agendas_reap() == 10
    with time_machine.travel(long_ago, tick=False):
        large = finish(submitter, "succeeded", failures=1, callback_url="https://h.example/cb")
    clone_terminal_agendas(large, 199)
    with CaptureQueriesContext(connection) as two_hundred:
        assert timed.agendas_reap() == 200

    # The shortest TTL, then the batch.
    assert len(ten) == len(two_hundred) == 2
    for captured in (ten, two_hundred):
        assert _deleted_tables(_statements(captured)[1]) == PLAN
    assert Agenda.objects.count() == 0
    assert Execution.objects.count() == OperationProgress.objects.count() == 0
    assert CallbackDelivery.objects.count() == 0


@postgres_only
def test_each_batch_is_one_statement(submitter, finish):
    with time_machine.travel(timezone.now() - OLD, tick=False):
        source = finish(submitter, callback_url="https://h.example/cb")
    clone_terminal_agendas(source, 199)

    with CaptureQueriesContext(connection) as captured:
        assert timed.agendas_reap(batch_size=50) == 200

    # The shortest TTL, four full batches, and the one that finds the end.
    assert len(captured) == 1 + 4 + 1
    assert Agenda.objects.count() == 0


@pytest.mark.parametrize("reap", [timed.agendas_reap, _reap_orm], ids=["sql", "orm"])
def test_nothing_expired_costs_at_most_two_statements_whatever_the_number_of_customers(
    reap, pool, submitter, other_submitter, finish
):
    Customer.objects.bulk_create(
        Customer(name=f"Tenant {n}", slug=f"tenant-{n}", resource_pool=pool, data_ttl_days=n + 1)
        for n in range(300)
    )
    other_submitter.customer.data_ttl_days = 60
    other_submitter.customer.save()
    with time_machine.travel(timezone.now() - OLD, tick=False):
        finish(other_submitter)  # old, but within its customer's TTL
    finish(submitter)  # young
    assert Customer.objects.count() > 300

    with CaptureQueriesContext(connection) as captured:
        assert reap() == 0

    assert len(captured) <= 2, _statements(captured)
    assert Agenda.objects.count() == 2


# --- concurrency -------------------------------------------------------------------------------


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_an_agenda_whose_progress_is_locked_is_left_for_the_next_reap(submitter, finish):
    with time_machine.travel(timezone.now() - OLD, tick=False):
        agendas = [finish(submitter, callback_url="https://h.example/cb") for _ in range(3)]
    busy = agendas[1]
    before = rows_under([busy.pk])
    locked, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:  # what a rerun does first: lock the progress row
        try:
            with transaction.atomic():
                AgendaProgress.objects.select_for_update().get(agenda=busy)
                locked.set()
                release.wait(30)
        except BaseException as error:  # surfaced below
            errors.append(error)
            locked.set()
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(30)
        assert timed.agendas_reap(batch_size=1) == 2
        assert rows_under([busy.pk]) == before
    finally:
        release.set()
        holder.join(30)
    assert errors == []

    assert timed.agendas_reap() == 1
    assert Agenda.objects.count() == 0


# --- rows beside an agenda without a database constraint --------------------------------------


def test_the_relations_into_the_history_without_a_database_constraint_are_exactly_the_listed_ones():
    from django.apps import apps

    history = (Agenda, AgendaProgress, Execution, OperationProgress)
    unconstrained = {
        (model.__name__, field.name)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if field.is_relation and field.related_model in history and not field.db_constraint
    }

    assert unconstrained == AGENDA_SIDE_ROWS | AGENDA_HISTORY_LINKS


def test_every_history_row_keeps_the_database_constraint_to_its_customer_and_insight():
    for model in (Agenda, AgendaProgress, Execution, OperationProgress):
        for field in model._meta.concrete_fields:
            if field.is_relation and field.name in ("customer", "insight"):
                assert field.db_constraint, (model.__name__, field.name)


HISTORY_ORPHANS = {  # rows whose parent is gone: each must stay empty after any reap
    "progress without its agenda": "SELECT p.id FROM agendas_agendaprogress p "
    "LEFT JOIN agendas_agenda a ON a.id = p.agenda_id WHERE a.id IS NULL",
    "execution without its agenda": "SELECT e.id FROM agendas_execution e "
    "LEFT JOIN agendas_agenda a ON a.id = e.agenda_id WHERE a.id IS NULL",
    "operation without its progress": "SELECT o.id FROM agendas_operationprogress o "
    "LEFT JOIN agendas_agendaprogress p ON p.id = o.agenda_progress_id WHERE p.id IS NULL",
    "progress pointing at a missing execution": "SELECT p.id FROM agendas_agendaprogress p "
    "LEFT JOIN agendas_execution e ON e.id = p.current_execution_id "
    "WHERE p.current_execution_id IS NOT NULL AND e.id IS NULL",
    "execution of another agenda as current": "SELECT p.id FROM agendas_agendaprogress p "
    "JOIN agendas_execution e ON e.id = p.current_execution_id WHERE e.agenda_id <> p.agenda_id",
}


@pytest.mark.parametrize("reap", [timed.agendas_reap, _reap_orm], ids=["sql", "orm"])
def test_a_reap_leaves_no_history_row_whose_parent_is_gone(
    reap, submitter, other_submitter, finish, submit_agenda, insight, fill, pull
):
    with time_machine.travel(timezone.now() - OLD, tick=False):
        for principal in (submitter, other_submitter):
            finish(principal, "succeeded", failures=1)
            finish(principal, "failed")
            finish(principal, "aborted")
        submit_agenda(submitter)
        fill(insight)
        pull(insight, count=10)
    finish(submitter)
    assert (
        Execution.objects.count() == 8
    )  # 2 + 1 expired a customer (the aborted ran none), 1 + 1 kept

    assert reap() == 6

    with connection.cursor() as cursor:
        for what, sql in HISTORY_ORPHANS.items():
            cursor.execute(sql)
            assert cursor.fetchall() == [], what
    assert Agenda.objects.count() == AgendaProgress.objects.count() == 2


@postgres_only
def test_a_batch_deletes_or_clears_every_row_beside_an_agenda():
    from django.apps import apps

    batch = reap_statement()
    for model_name, field_name in AGENDA_SIDE_ROWS:
        model = next(m for m in apps.get_models() if m.__name__ == model_name)
        column = model._meta.get_field(field_name).column
        table = model._meta.db_table
        assert re.search(rf'DELETE FROM "{table}" WHERE "{column}" = ', batch) or re.search(
            rf'UPDATE "{table}" SET "{column}" = NULL', batch
        ), (model_name, field_name)


def test_a_reap_leaves_no_wait_of_an_expired_waiter_or_upstream(submitter, finish):
    with time_machine.travel(timezone.now() - OLD, tick=False):
        upstream = finish(submitter)
        waiter = finish(submitter, after={"agendas": [upstream.pk]})
        young_waiter_of_it = finish(submitter, after={"agendas": [upstream.pk]})
    AgendaProgress.objects.filter(agenda=young_waiter_of_it).update(completed_at=timezone.now())

    assert timed.agendas_reap() == 2

    assert not Agenda.objects.filter(pk__in=[upstream.pk, waiter.pk]).exists()
    assert not AgendaWait.objects.filter(agenda_id__in=[upstream.pk, waiter.pk]).exists()
    assert not AgendaDependency.objects.filter(waiter_id=waiter.pk).exists()
    assert not AgendaDependency.objects.filter(upstream_id=upstream.pk).exists()
    assert AgendaWait.objects.filter(agenda=young_waiter_of_it).exists()
