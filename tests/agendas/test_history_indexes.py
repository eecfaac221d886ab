"""The history tables keep one index per question: no `varchar_pattern_ops` twin (no LIKE is
made on their columns) and no single-column index that a composite one already leads with;
migration 0026 gets there by dropping and renaming, so the plain indexes are not rebuilt."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress

HISTORY = (Agenda, AgendaProgress, OperationProgress, Execution)
BEFORE = [("agendas", "0025_agenda_template_index")]
AFTER = [("agendas", "0026_history_plain_indexes")]


def indexes(tables) -> dict[str, tuple[str, str]]:
    """index name → (table, definition) on PostgreSQL's catalogue."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, tablename, indexdef FROM pg_indexes WHERE tablename = ANY(%s)",
            [list(tables)],
        )
        return {name: (table, definition) for name, table, definition in cursor.fetchall()}


def oid(name: str) -> int | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)::oid", [f'"{name}"'])
        return cursor.fetchone()[0]


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


@pytest.mark.django_db
def test_no_history_index_is_a_pattern_ops_twin_or_a_lone_customer_or_insight_column():
    found = indexes(model._meta.db_table for model in HISTORY)

    assert found  # the catalogue was read
    assert [name for name, (_, d) in found.items() if "pattern_ops" in d] == []
    lone = [
        name
        for name, (_, definition) in found.items()
        if definition.endswith(("btree (customer_id)", "btree (insight_id)"))
    ]
    # The agenda keeps its insight index: none of its composite indexes leads with insight.
    assert lone == ["agendas_agenda_insight_id_f94fbb5a"]


@pytest.mark.django_db
def test_every_index_the_history_models_declare_is_in_the_database():
    found = indexes(model._meta.db_table for model in HISTORY)

    for model in HISTORY:
        for index in model._meta.indexes:
            assert found.get(index.name, (None,))[0] == model._meta.db_table, index.name


@pytest.mark.django_db(transaction=True)
def test_the_migration_renames_the_plain_indexes_and_its_reverse_restores_the_twins():
    try:
        migrate(BEFORE)
        before = {name: oid(name) for name in ("agendas_agenda_link_id_cdf65e67",)}
        assert oid("agendas_agenda_link_id_cdf65e67_like") is not None
        assert oid("agendas_execution_insight_id_180e0d87") is not None

        migrate(AFTER)

        # The same index under its declared name: renamed, not built again.
        assert oid("agenda_link_id") == before["agendas_agenda_link_id_cdf65e67"]
        assert oid("agendas_agenda_link_id_cdf65e67") is None
        assert oid("agendas_agenda_link_id_cdf65e67_like") is None
        assert oid("agendas_execution_insight_id_180e0d87") is None

        migrate(BEFORE)

        assert oid("agenda_link_id") is None
        assert oid("agendas_agenda_link_id_cdf65e67") is not None
        assert oid("agendas_agenda_link_id_cdf65e67_like") is not None
        assert oid("agendas_execution_insight_id_180e0d87") is not None
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
