"""The benchmarks' stand-in for autovacuum works on a table when autovacuum would, by the
table's own storage parameters where the migrations set them (bench/autovacuum.py)."""

import pytest
from django.db import connection

from bench.autovacuum import tables_due
from tests.factories import CustomerFactory, InsightFactory

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own counters"),
]


@pytest.fixture(autouse=True)
def _counted_from_zero():
    """The two tables vacuumed and analysed first: the counters other tests left (a flush
    between tests truncates the tables but keeps them) start again from nothing."""
    with connection.cursor() as cursor:
        for table in ("django_q_ormq", "scheduling_customerlane"):
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    _sent_statistics()


def _changed_since_analyze(table: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = %s", [table]
        )
        return cursor.fetchone()[0]


def _sent_statistics() -> None:
    """This backend's counters, sent to the server (they are otherwise sent once a second)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT 1")


def _due() -> dict[str, tuple[bool, bool]]:
    connection.ensure_connection()
    due = tables_due(connection.connection)
    return {table: (vacuum, analyze) for table, vacuum, analyze in due}


def test_a_table_with_the_servers_settings_is_analysed_after_fifty_changed_rows():
    # autovacuum_analyze_threshold 50 + scale factor 0.1 × 0 rows; a vacuum wants 50 dead rows
    # or 1,000 inserted.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_q_ormq (key, payload, lock) "
            "SELECT 'k', 'p', now() FROM generate_series(1, 200)"
        )
    _sent_statistics()
    assert _changed_since_analyze("django_q_ormq") == 200
    assert _due()["django_q_ormq"] == (False, True)

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_q_ormq")
    _sent_statistics()
    assert _due()["django_q_ormq"] == (True, True)


def test_a_table_with_its_own_thresholds_waits_for_them():
    # The lanes table sets 1,000 changed and dead rows for both (agendas/migrations/0010).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_class WHERE relname = 'scheduling_customerlane' "
            "AND 'autovacuum_analyze_threshold=1000' = ANY(reloptions)"
        )
        assert cursor.fetchone()[0] == 1

    insight, customer = InsightFactory(), CustomerFactory()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO scheduling_customerlane (insight_id, customer_id, active, served) "
            "VALUES (%s, %s, true, 0)",
            [insight.pk, customer.pk],
        )
        cursor.execute(
            "DO $$ BEGIN FOR turn IN 1..600 LOOP "
            "UPDATE scheduling_customerlane SET served = served + 1; END LOOP; END $$"
        )
    _sent_statistics()
    # 601 changed rows and up to 600 dead: past the server's thresholds, under the table's.
    assert _changed_since_analyze("scheduling_customerlane") == 601
    assert "scheduling_customerlane" not in _due()
