"""The tables every agenda writes, and those its fills, callbacks and waits write, keep no index
that another one covers: a plain index whose columns (and operator classes) begin another
index of the same table answers no question the longer one cannot, and costs a write at every
insert and every non-HOT update. Migrations 0029 and 0035 drop the foreign-key indexes that
were covered (docs/decisions.md)."""

import pytest
from django.db import connection

from agendas.models import (
    Agenda,
    AgendaDependency,
    AgendaProgress,
    CallbackDelivery,
    Execution,
    OperationProgress,
)
from scheduling.models import CustomerLane, QueuedAgenda, ReadyAgenda
from tests.migration_steps import migrate

HOT = (Agenda, AgendaProgress, OperationProgress, Execution, ReadyAgenda, QueuedAgenda)
# Written by every fill (a lane for each customer it serves), callback and wait.
ALSO_WRITTEN = (CustomerLane, CallbackDelivery, AgendaDependency)
BEFORE = [("agendas", "0028_progress_last_execution_number")]
AFTER = [("agendas", "0029_covered_foreign_key_indexes")]
DROPPED = {
    "agendas_execution_agenda_id_ea90cb63",
    "agendas_operationprogress_agenda_progress_id_974e9266",
    "scheduling_queuedagenda_insight_id_f0e6038e",
    "scheduling_readyagenda_insight_id_fd45aa6b",
}

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="reads PostgreSQL's catalogue"
)


def covered_indexes(tables) -> list[tuple[str, str]]:
    """(index, the index that covers it): neither partial nor on expressions, the first not
    unique, its key columns and operator classes the leading ones of the second."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT i.indexrelid::regclass::text, j.indexrelid::regclass::text
            FROM pg_index i
            JOIN pg_index j ON j.indrelid = i.indrelid AND j.indexrelid <> i.indexrelid
            WHERE i.indrelid = ANY(%s::regclass[])
              AND NOT i.indisunique
              AND i.indpred IS NULL AND j.indpred IS NULL
              AND i.indexprs IS NULL AND j.indexprs IS NULL
              AND (j.indkey::int2[])[0:i.indnkeyatts - 1] = (i.indkey::int2[])[0:i.indnkeyatts - 1]
              AND (j.indclass::oid[])[0:i.indnkeyatts - 1]
                  = (i.indclass::oid[])[0:i.indnkeyatts - 1]
              AND j.indnkeyatts >= i.indnkeyatts
            ORDER BY 1, 2
            """,
            [[model._meta.db_table for model in tables]],
        )
        return cursor.fetchall()


def index_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [f'"{name}"'])
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_no_index_of_the_tables_every_agenda_writes_is_covered_by_another():
    assert covered_indexes(HOT) == []


@pytest.mark.django_db
def test_no_index_of_the_lanes_the_callback_outbox_or_the_waits_is_covered_by_another():
    assert covered_indexes(ALSO_WRITTEN) == []


@pytest.mark.django_db
def test_the_covered_index_check_finds_an_index_that_is():
    with connection.cursor() as cursor:
        cursor.execute('CREATE INDEX "probe_queue_insight" ON scheduling_queuedagenda (insight_id)')

    assert covered_indexes([QueuedAgenda]) == [("probe_queue_insight", "queue_order")]


LATER_BEFORE = [("agendas", "0034_callback_list_indexes")]
LATER_AFTER = [("agendas", "0035_covered_lane_outbox_wait_indexes")]
LATER_DROPPED = {
    "scheduling_customerlane_insight_id_4ab7d67f",
    "scheduling_callbackdelivery_agenda_id_21980546",
    "agendas_agendadependency_waiter_id_521d3137",
}
# (before, after, tables read, indexes it drops, tables whose insight constraint stays)
MIGRATIONS = [
    (BEFORE, AFTER, HOT, DROPPED, ["scheduling_queuedagenda", "scheduling_readyagenda"]),
    (LATER_BEFORE, LATER_AFTER, ALSO_WRITTEN, LATER_DROPPED, ["scheduling_customerlane"]),
]


def insight_constraints(tables: list[str]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_constraint WHERE contype = 'f' "
            "AND conrelid = ANY(%s::regclass[]) AND confrelid = 'resourcepools_insight'::regclass",
            [tables],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_latest_schema")
@pytest.mark.parametrize(
    "before, after, tables, dropped, constrained", MIGRATIONS, ids=["0029", "0035"]
)
def test_each_migration_drops_only_the_covered_indexes_and_its_reverse_builds_them_again(
    before, after, tables, dropped, constrained
):
    migrate(before)
    assert all(index_exists(name) for name in dropped)
    assert {name for name, _ in covered_indexes(tables)} == dropped

    migrate(after)

    assert not any(index_exists(name) for name in dropped)
    assert covered_indexes(tables) == []
    # The foreign keys themselves stay (the queue tables' and lanes' insight constraints).
    assert insight_constraints(constrained) == len(constrained)

    migrate(before)

    assert all(index_exists(name) for name in dropped)
