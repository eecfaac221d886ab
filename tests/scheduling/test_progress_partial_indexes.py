"""Two progress indexes hold only the rows they are asked about (migration agendas 0030,
docs/decisions.md): the promote's pending rows by `run_after`, and the executing rows that
point at an execution. A progress row's updates are never HOT, so every full index of the table
takes an entry at each step of every agenda; these two take one, at the claim. Likewise the
insight's window of executions holds the ended ones only (migration agendas 0037): an
execution's insert writes no entry there."""

import pytest
from django.db import connection
from django.utils import timezone

from agendas.models import AgendaProgress
from agendas.states import bulk
from tests.agendas.test_covered_indexes import index_exists
from tests.migration_steps import migrate
from tests.query_plans import partial_index_entries

BEFORE = [("agendas", "0029_covered_foreign_key_indexes")]
AFTER = [("agendas", "0030_progress_partial_indexes")]
FULL = {"progress_state_run_after", "agendas_agendaprogress_current_execution_id_42b05f34"}
PARTIAL = {"progress_pending_run_after", "progress_current_execution"}

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="reads PostgreSQL's catalogue and plans"
)


def _index_entries(name: str) -> int:
    """The entries of one of the two partial indexes, read from the index alone."""
    column, predicate = {
        "progress_pending_run_after": ("run_after", "state = 'pending'"),
        "progress_current_execution": ("current_execution_id", "current_execution_id IS NOT NULL"),
    }[name]
    return partial_index_entries(name, "agendas_agendaprogress", column, predicate)


@pytest.mark.django_db
def test_an_agenda_that_ran_leaves_no_entry_in_either_partial_index(
    submitter, submit_agenda, insight, pull, report
):
    agendas = [submit_agenda(submitter) for _ in range(3)]
    pulled = pull(insight, count=3)

    # Executing: each points at its execution, and only these rows are in that index.
    assert _index_entries("progress_current_execution") == 3
    assert _index_entries("progress_pending_run_after") == 0

    for item in pulled:
        report(item, state="succeeded")

    assert set(
        AgendaProgress.objects.filter(agenda__in=agendas).values_list("state", flat=True)
    ) == {"succeeded"}
    assert _index_entries("progress_current_execution") == 0
    assert _index_entries("progress_pending_run_after") == 0


@pytest.mark.django_db
def test_the_promote_reads_the_pending_rows_off_their_own_index(submitter, submit_agenda, insight):
    later = timezone.now() + timezone.timedelta(hours=1)
    for _ in range(3):
        submit_agenda(submitter, run_after=later)
    for _ in range(2):
        submit_agenda(submitter)  # ready: not in the index

    assert _index_entries("progress_pending_run_after") == 3
    statements = []

    def keep(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        promoted = bulk.progress_promote_due(now=later + timezone.timedelta(seconds=1), limit=10)

    assert sum(promoted.values()) == 3
    [(sql, params)] = [(sql, params) for sql, params in statements if "run_after" in sql]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "progress_pending_run_after" in plan, plan


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("back_to_the_latest_schema")
def test_the_migration_swaps_the_full_indexes_for_partial_ones_and_its_reverse_swaps_back():
    migrate(BEFORE)
    assert all(index_exists(name) for name in FULL)
    assert not any(index_exists(name) for name in PARTIAL)

    migrate(AFTER)

    assert not any(index_exists(name) for name in FULL)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexrelid::regclass::text, pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indexrelid::regclass::text = ANY(%s) ORDER BY 1",
            [sorted(PARTIAL)],
        )
        assert cursor.fetchall() == [
            ("progress_current_execution", "(current_execution_id IS NOT NULL)"),
            ("progress_pending_run_after", "((state)::text = 'pending'::text)"),
        ]

    migrate(BEFORE)

    assert all(index_exists(name) for name in FULL)
    assert not any(index_exists(name) for name in PARTIAL)


@pytest.mark.django_db
def test_an_open_execution_writes_no_entry_in_its_insights_window_and_an_ended_one_does(
    submitter, submit_agenda, insight, pull, report
):
    for _ in range(3):
        submit_agenda(submitter)
    first = pull(insight, count=3)[0]

    def window_entries() -> int:
        return partial_index_entries(
            "execution_insight_window", "agendas_execution", "insight_id", "ended_at IS NOT NULL"
        )

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
            "WHERE indexrelid = 'execution_insight_window'::regclass"
        )
        assert cursor.fetchone()[0] == "(ended_at IS NOT NULL)"
    assert window_entries() == 0  # three open executions
    report(first, state="succeeded")
    assert window_entries() == 1
