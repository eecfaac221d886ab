"""deploy/postgresql/partitioned-history.sql, the runnable first step of docs/capacity.md §4:
it builds on the migrated schema, copies an agenda's whole history into one month's partitions,
keeps the keys' meaning, prunes a lookup that carries the time to one partition, and drops a
month as a reap — and never touches POP's own tables."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agendas.models import Agenda, AgendaProgress, Execution, OperationProgress
from scheduling.fill import insight_fill
from scheduling.pull import insight_pull

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL partitions"),
]

SQL = Path(__file__).resolve().parents[2] / "deploy/postgresql/partitioned-history.sql"
HISTORY = (Agenda, AgendaProgress, OperationProgress, Execution)
TWINS = ("agenda", "agendaprogress", "operationprogress", "execution")


def run_sql(sql: str, params=None):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else None


def live_counts() -> dict[str, int]:
    return {model._meta.db_table: model.objects.count() for model in HISTORY}


def twin_counts(month_suffix: str = "") -> dict[str, int]:
    suffix = f"_{month_suffix}" if month_suffix else ""
    return {
        twin: run_sql(f"SELECT count(*) FROM pop_history.{twin}{suffix}")[0][0] for twin in TWINS
    }


def month_start(moment):
    return moment.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def last_month():
    return month_start(timezone.now()) - timedelta(days=3)


def copy_all() -> int:
    """Copy every agenda (last month's and this month's) into pop_history."""
    [(copied,)] = run_sql(
        "SELECT pop_history.copy_from_live(%s, %s)", [last_month(), timezone.now()]
    )
    return copied


@pytest.fixture
def history(settings, submit_agenda, submitter, insight, worker):
    """Three agendas: one of last month, pulled (an execution); two of this month; the old one
    and one new one with an idempotency key. Returns (last month's agenda, this month's agendas)."""
    settings.POP_FILL_NUDGE = "off"
    old = submit_agenda(submitter, idempotency_key="order-0")
    insight_fill(insight_id=insight.pk)
    assert insight_pull(principal=worker.user, insight=insight, worker="w1", count=1)
    Agenda.objects.filter(pk=old.pk).update(created_at=last_month())
    new = [submit_agenda(submitter), submit_agenda(submitter, idempotency_key="order-1")]
    run_sql(SQL.read_text())
    return old, new


def test_the_script_builds_twins_with_the_live_columns_and_runs_again_unchanged(history):
    for model, twin in zip(HISTORY, TWINS, strict=True):
        live = [field.column for field in model._meta.concrete_fields]
        columns = run_sql(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = 'pop_history' AND table_name = %s ORDER BY ordinal_position",
            [twin],
        )
        extra = [] if twin == "agenda" else ["agenda_created_at"]
        assert sorted(name for (name,) in columns) == sorted(live + extra)
    indexes_before = run_sql("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pop_history'")

    run_sql(SQL.read_text())

    assert run_sql("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pop_history'") == (
        indexes_before
    )


def test_copying_puts_each_agendas_whole_history_in_its_creation_months_partitions(history):
    old, new = history
    before = live_counts()

    copied = copy_all()

    assert copied == 3
    assert live_counts() == before  # POP's tables: nothing changed
    previous = last_month().strftime("y%Ym%m")
    this_month = timezone.now().strftime("y%Ym%m")
    # The old agenda's progress, 2 operations and its execution (made this month, over its
    # retries) all sit in its creation month's partitions.
    assert twin_counts(previous) == {
        "agenda": 1,
        "agendaprogress": 1,
        "operationprogress": 2,
        "execution": 1,
    }
    assert twin_counts(this_month) == {
        "agenda": 2,
        "agendaprogress": 2,
        "operationprogress": 4,
        "execution": 0,
    }
    assert sorted(
        run_sql("SELECT agenda_id, idempotency_key FROM pop_history.idempotency_key")
    ) == sorted([(old.pk, "order-0"), (new[1].pk, "order-1")])


def test_the_keys_keep_their_meaning_with_the_creation_time_appended(history):
    copy_all()
    refusals = {
        "a second progress row for an agenda": (
            "INSERT INTO pop_history.agendaprogress "
            "SELECT (p).* FROM (SELECT p FROM pop_history.agendaprogress p LIMIT 1) AS one"
        ),
        "an idempotency key twice for a customer": (
            "INSERT INTO pop_history.idempotency_key SELECT * FROM pop_history.idempotency_key"
        ),
        "an operation name twice in an agenda": (
            "INSERT INTO pop_history.operationprogress SELECT (o).* FROM "
            "(SELECT o FROM pop_history.operationprogress o LIMIT 1) AS one"
        ),
    }
    before = twin_counts()
    for label, sql in refusals.items():
        with pytest.raises(IntegrityError), transaction.atomic():
            run_sql(sql)
        assert twin_counts() == before, label


def test_a_lookup_that_carries_the_creation_time_reads_one_partition(history):
    old, _ = history
    copy_all()
    created = Agenda.objects.get(pk=old.pk).created_at

    by_id = "\n".join(
        line
        for (line,) in run_sql(
            "EXPLAIN SELECT * FROM pop_history.agendaprogress WHERE agenda_id = %s", [old.pk]
        )
    )
    by_id_and_time = "\n".join(
        line
        for (line,) in run_sql(
            "EXPLAIN SELECT * FROM pop_history.agendaprogress "
            "WHERE agenda_id = %s AND agenda_created_at = %s",
            [old.pk, created],
        )
    )

    assert len(re.findall(r" on agendaprogress_y\d{4}m\d{2}", by_id)) == 2  # both months
    assert re.findall(r" on agendaprogress_y\d{4}m\d{2}", by_id_and_time) == [
        f" on agendaprogress_{created:y%Ym%m}"
    ]


def test_dropping_a_month_removes_exactly_its_agendas_rows_and_keys(history):
    old, new = history
    copy_all()
    before = live_counts()

    [(dropped,)] = run_sql("SELECT pop_history.month_drop(%s::date)", [last_month()])
    [(again,)] = run_sql("SELECT pop_history.month_drop(%s::date)", [last_month()])

    assert (dropped, again) == (1, 0)
    assert twin_counts() == {
        "agenda": 2,
        "agendaprogress": 2,
        "operationprogress": 4,
        "execution": 0,
    }
    assert run_sql("SELECT id FROM pop_history.agenda ORDER BY id") == sorted(
        (agenda.pk,) for agenda in new
    )
    assert run_sql("SELECT agenda_id FROM pop_history.idempotency_key") == [(new[1].pk,)]
    assert live_counts() == before  # POP's tables: nothing changed
