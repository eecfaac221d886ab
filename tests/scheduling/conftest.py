"""Helpers to drive agendas through fill → pull → report with the real services."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection, transaction

from agendas.models import Agenda, AgendaProgress, OperationProgress
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling import report as report_service
from scheduling.models import ReadyAgenda


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    # Tests drive fills explicitly; nudges are tested on their own (test_fill_nudges.py).
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def three_operations() -> list[dict]:
    return [
        {"name": "probe", "type": "mediainfo", "payload": {"url": "s3://in/a.mp4"}},
        {"name": "measure", "type": "mediainfo", "payload": {"size": "@<probe.out::/size>"}},
        {
            "name": "report",
            "type": "log",
            "payload": {"size": "@<measure.out>"},
            "depends_on": ["probe"],
        },
    ]


@pytest.fixture
def fill():
    def run(insight):
        return fill_service.insight_fill(insight_id=insight.pk)

    return run


@pytest.fixture
def pull(worker):
    """Pull as the pool owner's worker; returns the PulledAgenda list."""

    def run(insight, count: int = 10, name: str = "w1"):
        insight.refresh_from_db()
        return pull_service.insight_pull(
            principal=worker.user, insight=insight, worker=name, count=count
        )

    return run


@pytest.fixture
def report():
    def run(pulled, **fields):
        execution = getattr(pulled, "execution", pulled)
        return report_service.execution_report(
            execution_id=execution.pk, lease_token=execution.lease_token, **fields
        )

    return run


@pytest.fixture
def run_one(submit_agenda, fill, pull):
    """Submit one agenda as `principal`, fill and pull it; return the PulledAgenda."""

    def run(principal, insight, **options):
        agenda = submit_agenda(principal, **options)
        fill(insight)
        [pulled] = [item for item in pull(insight) if item.agenda.pk == agenda.pk]
        return pulled

    return run


def state_of(agenda: Agenda) -> str:
    return AgendaProgress.objects.get(agenda=agenda).state


def clone_ready_agendas(source: Agenda, copies: int) -> None:
    """Copy a ready agenda (submitted through the services) `copies` times, in SQL.

    Only for backlogs too big to submit one by one in a test (10 ms a submit here): the
    copies are exactly the rows agenda_submit wrote for `source` (agenda, progress,
    operations, ready row), with fresh ids and `added_at` 1 µs apart after the source's.
    PostgreSQL only.
    """
    tables = {
        model: connection.ops.quote_name(model._meta.db_table)
        for model in (Agenda, AgendaProgress, OperationProgress, ReadyAgenda)
    }

    def columns(model, overrides: dict[str, str], skip: tuple[str, ...] = ()) -> tuple[str, str]:
        names = [f.column for f in model._meta.concrete_fields if f.column not in skip]
        return (
            ", ".join(connection.ops.quote_name(name) for name in names),
            ", ".join(
                overrides.get(name, f"s.{connection.ops.quote_name(name)}") for name in names
            ),
        )

    step = "(c.n * interval '1 microsecond')"
    agenda_cols, agenda_vals = columns(
        Agenda,
        {
            "id": "c.agenda_id",
            "idempotency_key": "''",
            "created_at": f"s.created_at + {step}",
            "updated_at": f"s.updated_at + {step}",
        },
    )
    progress_cols, progress_vals = columns(
        AgendaProgress, {"id": "c.progress_id", "agenda_id": "c.agenda_id"}
    )
    operation_cols, operation_vals = columns(
        OperationProgress, {"id": "gen_random_uuid()", "agenda_progress_id": "c.progress_id"}
    )
    ready_cols, ready_vals = columns(
        ReadyAgenda, {"agenda_id": "c.agenda_id", "added_at": f"s.added_at + {step}"}, ("id",)
    )
    source_progress = AgendaProgress.objects.get(agenda=source).pk
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE pop_clones AS SELECT gen_random_uuid() AS agenda_id, "
            "gen_random_uuid() AS progress_id, n FROM generate_series(1, %s) AS n",
            [copies],
        )
        cursor.execute(
            f"INSERT INTO {tables[Agenda]} ({agenda_cols}) SELECT {agenda_vals} "
            f"FROM pop_clones c, {tables[Agenda]} s WHERE s.id = %s",
            [source.pk],
        )
        cursor.execute(
            f"INSERT INTO {tables[AgendaProgress]} ({progress_cols}) SELECT {progress_vals} "
            f"FROM pop_clones c, {tables[AgendaProgress]} s WHERE s.agenda_id = %s",
            [source.pk],
        )
        cursor.execute(
            f"INSERT INTO {tables[OperationProgress]} ({operation_cols}) SELECT {operation_vals} "
            f"FROM pop_clones c, {tables[OperationProgress]} s WHERE s.agenda_progress_id = %s",
            [source_progress],
        )
        cursor.execute(
            f"INSERT INTO {tables[ReadyAgenda]} ({ready_cols}) SELECT {ready_vals} "
            f"FROM pop_clones c, {tables[ReadyAgenda]} s WHERE s.agenda_id = %s",
            [source.pk],
        )
        cursor.execute("DROP TABLE pop_clones")
        for table in tables.values():
            cursor.execute(f"ANALYZE {table}")


@contextmanager
def progress_row_held(agenda: Agenda) -> Iterator[None]:
    """Inside the block, another transaction (a thread's own connection) holds `agenda`'s
    progress row locked, as a pause or an abort in flight would; it lets go after the block.
    Needs `django_db(transaction=True)`: the thread's transaction must see committed rows."""
    locked, release, errors = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with transaction.atomic():
                AgendaProgress.objects.select_for_update().get(agenda=agenda)
                locked.set()
                release.wait(10)
        except BaseException as error:
            errors.append(error)
        finally:
            locked.set()
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert locked.wait(10)
        yield
    finally:
        release.set()
        thread.join(10)
    assert errors == []
