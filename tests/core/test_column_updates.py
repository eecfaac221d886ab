"""Rows updated from columns (core/column_updates.py) end as `save(update_fields=…)` leaves
them, in one statement whose text and parameter count do not depend on the rows."""

import pytest
from django.db import DataError, connection, transaction
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas.models import AgendaProgress, Execution, OperationProgress
from core.column_inserts import insert_columns
from core.column_updates import update_instances, update_instances_together

pytestmark = pytest.mark.django_db

OPERATION_COLUMNS = ("state", "percent_complete", "message", "result", "params", "diagnostics")


def _operations(submitter, submit_agenda, count: int) -> list[OperationProgress]:
    found = []
    for _ in range(count):
        progress = submit_agenda(submitter).progress
        found += list(OperationProgress.objects.filter(agenda_progress=progress))
    return found


def _changed(operation: OperationProgress, n: int) -> None:
    operation.state = OperationProgress.State.SUCCEEDED
    operation.percent_complete = 50.0 + n
    operation.message = f"step {n} — ünïcode"
    operation.result = {"frames": n, "nested": [None, True, 1.5]} if n % 2 else None
    operation.params = {"resume": n}
    operation.diagnostics = [{"message": "fine", "detail": None}]


def _stored(operation) -> dict:
    return model_to_dict(type(operation).objects.get(pk=operation.pk))


def test_rows_updated_from_columns_equal_the_rows_save_writes(submitter, submit_agenda):
    by_columns = _operations(submitter, submit_agenda, 2)
    by_save = _operations(submitter, submit_agenda, 2)
    for n, (one, other) in enumerate(zip(by_columns, by_save, strict=True)):
        _changed(one, n)
        _changed(other, n)

    update_instances(OperationProgress, by_columns, OPERATION_COLUMNS)
    for operation in by_save:
        operation.save(update_fields=[*OPERATION_COLUMNS, "updated_at"])

    skip = ("id", "agenda_progress", "customer", "link_id", "cid", "updated_at", "created_at")
    for one, other in zip(by_columns, by_save, strict=True):
        mine, theirs = _stored(one), _stored(other)
        assert {k: v for k, v in mine.items() if k not in skip} == {
            k: v for k, v in theirs.items() if k not in skip
        }
    assert OperationProgress.objects.filter(result__isnull=True, pk=by_columns[0].pk).exists()


def test_every_auto_now_field_is_stamped_on_the_rows_and_the_instances(submitter, submit_agenda):
    operations = _operations(submitter, submit_agenda, 1)
    before = timezone.now()

    update_instances(OperationProgress, operations, ["message"])

    for operation in operations:
        stored = OperationProgress.objects.get(pk=operation.pk)
        assert stored.updated_at == operation.updated_at >= before
        assert stored.created_at < before  # auto_now_add is not touched


def test_the_statement_is_one_and_the_same_for_ten_rows_and_for_thirty(submitter, submit_agenda):
    operations = _operations(submitter, submit_agenda, 10)  # 3 operations each
    sent = []

    def capture(execute, sql, params, many, context):
        sent.append((sql, len(params)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        update_instances(OperationProgress, operations[:10], OPERATION_COLUMNS)
        update_instances(OperationProgress, operations, OPERATION_COLUMNS)

    assert len(sent) == 2
    assert sent[0] == sent[1]
    # primary key, six columns, updated_at: one JSON text of rows and their number
    assert sent[0][1] == 2


def test_no_instances_send_no_statement():
    with CaptureQueriesContext(connection) as captured:
        update_instances(OperationProgress, [], OPERATION_COLUMNS)

    assert captured.captured_queries == []


def test_a_value_too_long_for_its_column_is_refused_not_cut_short(submitter, submit_agenda):
    progress = submit_agenda(submitter).progress
    execution_count = Execution.objects.count()
    stored = AgendaProgress.objects.get(pk=progress.pk)
    stored.state = "x" * 200  # the column is a varchar(20)

    with pytest.raises(DataError), transaction.atomic():
        update_instances(AgendaProgress, [stored], ["state"])

    assert AgendaProgress.objects.get(pk=progress.pk).state == progress.state
    assert Execution.objects.count() == execution_count


def test_a_field_the_model_does_not_have_is_refused_and_nothing_is_written(
    submitter, submit_agenda
):
    operations = _operations(submitter, submit_agenda, 1)
    before = [_stored(operation) for operation in operations]
    operations[0].message = "changed"

    with pytest.raises(ValueError, match="no fields"):
        update_instances(OperationProgress, operations, ["message", "colour"])

    assert [_stored(operation) for operation in operations] == before


def test_an_integer_column_with_a_value_django_prepares_is_written_whole(submitter, submit_agenda):
    first, second = _operations(submitter, submit_agenda, 1)[:2]
    first.position = 7  # a plain int, handed on
    second.position = "8"  # prepared by Django into psycopg's Int4, which it will not mix with int

    update_instances(OperationProgress, [first, second], ["position"])

    stored = dict(
        OperationProgress.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "position")
    )
    assert stored == {first.pk: 7, second.pk: 8}


def test_a_few_rows_are_found_by_their_primary_key_not_by_reading_the_whole_table(
    submitter, submit_agenda
):
    operations = _operations(submitter, submit_agenda, 1)
    progress = operations[0].agenda_progress
    many = 5000  # more of the table's rows, written set-based
    insert_columns(
        OperationProgress,
        {
            "agenda_progress_id": [progress.pk] * many,
            "customer_id": [progress.customer_id] * many,
            "position": list(range(100, 100 + many)),
            "name": [f"filler-{n}" for n in range(many)],
            "type": ["noop"] * many,
        },
        now=timezone.now(),
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {OperationProgress._meta.db_table}")
    sent = []

    def capture(execute, sql, params, many, context):
        sent.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        update_instances(OperationProgress, operations, OPERATION_COLUMNS)
    ((sql, params),) = sent
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "Index Scan using agendas_operationprogress_pkey" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_rows_of_several_models_are_updated_together_in_one_statement(submitter, submit_agenda):
    operations = _operations(submitter, submit_agenda, 2)
    progresses = [AgendaProgress.objects.get(pk=op.agenda_progress_id) for op in operations[::3]]
    for n, operation in enumerate(operations):
        _changed(operation, n)
    for progress in progresses:
        progress.message = "written together"
        progress.percent_complete = 42.0

    with CaptureQueriesContext(connection) as captured:
        update_instances_together(
            [
                (OperationProgress, operations, OPERATION_COLUMNS),
                (Execution, [], ["outcome"]),  # left out
                (AgendaProgress, progresses, ["message", "percent_complete"]),
            ]
        )

    assert len(captured.captured_queries) == (1 if connection.vendor == "postgresql" else 2)
    for n, operation in enumerate(operations):
        stored = OperationProgress.objects.get(pk=operation.pk)
        assert (stored.state, stored.percent_complete, stored.message) == (
            "succeeded",
            50.0 + n,
            f"step {n} — ünïcode",
        )
        assert stored.updated_at == operation.updated_at
    for progress in progresses:
        stored = AgendaProgress.objects.get(pk=progress.pk)
        assert (stored.message, stored.percent_complete) == ("written together", 42.0)
        assert stored.updated_at == progress.updated_at


def test_one_model_twice_in_one_statement_is_refused_and_nothing_is_written(
    submitter, submit_agenda
):
    operations = _operations(submitter, submit_agenda, 1)
    before = [_stored(operation) for operation in operations]
    for n, operation in enumerate(operations):
        _changed(operation, n)

    with pytest.raises(ValueError, match="each model once"):
        update_instances_together(
            [
                (OperationProgress, operations[:1], ["message"]),
                (OperationProgress, operations[1:], ["message"]),
            ]
        )

    assert [_stored(operation) for operation in operations] == before
