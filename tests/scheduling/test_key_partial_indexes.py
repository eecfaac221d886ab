"""The indexes of optional keys hold only the rows that have one (migration agendas 0032,
docs/decisions.md "Optional keys are indexed only where they are set"): `link_id` on the four
history tables, the agenda's `external_id`, template and schedule. Most agendas carry none, and
a full index took an entry for each of them — for the progress row at each of its never-HOT
state changes — all into one ever-growing run of equal keys."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agendas.models import Agenda
from agendas.selectors import progress_summary
from tests.agendas.test_covered_indexes import index_exists
from tests.migration_steps import migrate
from tests.query_plans import partial_index_entries, plan_of
from tests.scheduling.conftest import clone_ready_agendas

BEFORE = [("agendas", "0031_fill_queue_after")]
AFTER = [("agendas", "0032_partial_key_indexes")]
PREDICATES = {
    "agenda_external_id": "(NOT ((external_id)::text = ''::text))",
    "agenda_link_id": "(NOT ((link_id)::text = ''::text))",
    "agenda_schedule": "(schedule_id IS NOT NULL)",
    "agenda_template": "(template_id IS NOT NULL)",
    "execution_link_id": "(NOT ((link_id)::text = ''::text))",
    "operation_link_id": "(NOT ((link_id)::text = ''::text))",
    "progress_link_id": "(NOT ((link_id)::text = ''::text))",
}
# index → (its table, a column it holds)
INDEXED = {
    "agenda_external_id": ("agendas_agenda", "external_id"),
    "agenda_link_id": ("agendas_agenda", "link_id"),
    "agenda_schedule": ("agendas_agenda", "schedule_id"),
    "agenda_template": ("agendas_agenda", "template_id"),
    "execution_link_id": ("agendas_execution", "link_id"),
    "operation_link_id": ("agendas_operationprogress", "link_id"),
    "progress_link_id": ("agendas_agendaprogress", "link_id"),
}

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="reads PostgreSQL's catalogue and plans"
)


def predicates() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indexrelid::regclass::text = ANY(%s)",
            [sorted(PREDICATES)],
        )
        return dict(cursor.fetchall())


def index_entries(name: str) -> int:
    table, column = INDEXED[name]
    return partial_index_entries(name, table, column, PREDICATES[name])


@pytest.mark.django_db
def test_every_optional_key_index_is_partial_on_its_key_being_set():
    assert predicates() == PREDICATES


@pytest.mark.django_db
def test_the_key_indexes_find_a_keyed_agendas_rows_through_its_run(
    submitter, submit_agenda, insight, pull, report
):
    submit_agenda(submitter)
    keyed = submit_agenda(submitter, link_id="show-17", external_id="order-9")
    [first, second] = pull(insight, count=2)
    report(first, state="succeeded")
    report(second, state="succeeded")

    # The keyed agenda's rows, one each (its operations: one entry per operation), read from
    # the partial indexes alone; the other agenda's rows match no predicate.
    operations = len(keyed.operations)
    assert {name: index_entries(name) for name in INDEXED} == {
        "agenda_external_id": 1,
        "agenda_link_id": 1,
        "agenda_schedule": 0,
        "agenda_template": 0,
        "execution_link_id": 1,
        "operation_link_id": operations,
        "progress_link_id": 1,
    }
    assert Agenda.objects.filter(progress__state="succeeded").count() == 2


@pytest.fixture
def history(submitter, submit_agenda):
    """20,000 agendas without keys (each with its progress and operations) and one with them,
    analysed."""
    source = submit_agenda(submitter)
    clone_ready_agendas(source, 19_999)
    submit_agenda(submitter, link_id="show-17", external_id="order-9")
    with connection.cursor() as cursor:
        for table in ("agendas_agenda", "agendas_agendaprogress", "agendas_operationprogress"):
            cursor.execute(f"ANALYZE {table}")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("url", "index"),
    [
        ("/api/v1/agendas/?link_id=show-17", "agenda_link_id"),
        ("/api/v1/agendas/?external_id=order-9", "agenda_external_id"),
        ("/api/v1/agenda-progress/?link_id=show-17", "progress_link_id"),
        ("/api/v1/operation-progress/?link_id=show-17", "operation_link_id"),
    ],
)
def test_a_list_filtered_by_a_key_reads_the_keys_index(
    url, index, history, submitter, api_client_for
):
    with CaptureQueriesContext(connection) as queries:
        answer = api_client_for(submitter).get(url)

    assert answer.status_code == 200
    assert answer.json()["count"] >= 1
    pages = [q["sql"] for q in queries if " LIMIT " in q["sql"]]
    assert pages
    for sql in pages:
        assert index in plan_of(sql), sql


@pytest.mark.django_db
def test_the_progress_summary_of_a_link_id_reads_the_link_index(history, submitter):
    with CaptureQueriesContext(connection) as queries:
        summary = progress_summary(principal=submitter.user, link_id="show-17")

    assert summary["total"] == 1
    read = [q["sql"] for q in queries if "show-17" in q["sql"]]
    assert read  # the aggregate and the page
    for sql in read:
        assert "progress_link_id" in plan_of(sql), sql


@pytest.mark.django_db
def test_an_agenda_submitted_after_a_link_id_finds_its_upstream_by_the_link_index(
    history, submitter, submit_agenda
):
    with CaptureQueriesContext(connection) as queries:
        waiter = submit_agenda(submitter, after={"link_ids": ["show-17"]})

    assert waiter.progress.state == "pending"
    [sql] = [q["sql"] for q in queries if "show-17" in q["sql"] and "SELECT" in q["sql"]]
    assert "agenda_link_id" in plan_of(sql), sql


@pytest.mark.django_db
def test_a_deleted_schedule_finds_its_agendas_by_the_schedule_index():
    sql = 'UPDATE "agendas_agenda" SET "schedule_id" = NULL WHERE "schedule_id" IN (%s)'
    plan = plan_of(sql, ["00000000-0000-0000-0000-000000000000"], seqscan=False)
    assert "agenda_schedule" in plan, plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_latest_schema")
def test_the_migration_makes_the_key_indexes_partial_and_its_reverse_makes_them_full():
    migrate(BEFORE)
    assert set(predicates().values()) == {None}  # full, all but the schedule's present
    assert not index_exists("agenda_schedule")

    migrate(AFTER)

    assert predicates() == PREDICATES

    migrate(BEFORE)

    assert set(predicates().values()) == {None}
    assert not index_exists("agenda_schedule")
