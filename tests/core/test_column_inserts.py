"""Rows written from columns (core/column_inserts.py) are the rows `bulk_create` writes from
instances: every field not given takes its model default, the timestamps the given time."""

from datetime import timedelta

import pytest
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas.models import OperationProgress
from agendas.queue_models import CallbackDelivery, ReadyAgenda
from core.column_inserts import insert_columns

pytestmark = pytest.mark.django_db

SET_BY_THE_DATABASE = ("id", "created_at", "updated_at")


def _fields(row) -> dict:
    values = model_to_dict(row)
    return {name: value for name, value in values.items() if name not in SET_BY_THE_DATABASE}


def _operation_columns(progress, names: list[str]) -> dict[str, list]:
    return {
        "agenda_progress_id": [progress.pk] * len(names),
        "customer_id": [progress.customer_id] * len(names),
        "link_id": ["link-1"] * len(names),
        "cid": ["cid-1"] * len(names),
        "position": list(range(10, 10 + len(names))),
        "name": names,
        "type": ["noop"] * len(names),
    }


def test_operations_written_from_columns_equal_those_bulk_created_from_instances(
    submitter, submit_agenda
):
    progress = submit_agenda(submitter).progress
    now = timezone.now() - timedelta(minutes=5)

    inserted = insert_columns(
        OperationProgress, _operation_columns(progress, ["from-columns"]), now=now
    )
    columns = _operation_columns(progress, ["from-instances"])
    OperationProgress.objects.bulk_create(
        [OperationProgress(**{name: values[0] for name, values in columns.items()})]
    )

    assert inserted == 1
    from_columns = OperationProgress.objects.get(agenda_progress=progress, name="from-columns")
    from_instances = OperationProgress.objects.get(agenda_progress=progress, name="from-instances")
    expected = _fields(from_instances) | {"name": "from-columns"}
    assert _fields(from_columns) == expected
    assert from_columns.state == OperationProgress.State.WAITING
    assert from_columns.diagnostics == [] and from_columns.params == {}
    assert from_columns.result is None and from_columns.definition is None
    assert from_columns.created_at == from_columns.updated_at == now
    assert from_columns.pk != from_instances.pk


def test_each_row_gets_its_own_primary_key_and_its_own_values_in_order(submitter, submit_agenda):
    progress = submit_agenda(submitter).progress

    insert_columns(
        OperationProgress, _operation_columns(progress, ["a", "b", "c"]), now=timezone.now()
    )

    rows = OperationProgress.objects.filter(agenda_progress=progress, position__gte=10)
    assert sorted((row.position, row.name) for row in rows) == [(10, "a"), (11, "b"), (12, "c")]
    assert len({row.pk for row in rows}) == 3


def test_a_column_of_one_value_goes_once_as_a_parameter_and_every_row_gets_it(
    submitter, submit_agenda
):
    progress = submit_agenda(submitter).progress
    columns = _operation_columns(progress, ["a", "b"]) | {
        "params": [{"same": ["document"]}] * 2,
        "result": [None, None],
        "percent_complete": [1, 1.0],  # equal, but not one value: 1 and 1.0 are apart
    }

    with CaptureQueriesContext(connection) as captured:
        insert_columns(OperationProgress, columns, now=timezone.now())

    (statement,) = [query["sql"] for query in captured.captured_queries]
    assert statement.count("link-1") == statement.count("cid-1") == 1  # once, not per row
    assert statement.count("document") == 1 and statement.count('"noop"') == 0
    rows = OperationProgress.objects.filter(agenda_progress=progress, position__gte=10)
    written = sorted(
        (
            row.position,
            row.name,
            row.link_id,
            row.type,
            row.params,
            row.result,
            row.percent_complete,
        )
        for row in rows
    )
    assert written == [
        (10, "a", "link-1", "noop", {"same": ["document"]}, None, 1.0),
        (11, "b", "link-1", "noop", {"same": ["document"]}, None, 1.0),
    ]


@pytest.mark.parametrize(
    ("column", "values"),
    [
        ("params", [{"n": 1}, {"n": 1.0}, {"n": True}]),  # equal in Python, not as stored
        ("result", [None, {}, None]),
    ],
    ids=["documents", "null-and-document"],
)
def test_values_equal_in_python_but_stored_apart_are_each_stored_as_given(
    submitter, submit_agenda, column, values
):
    progress = submit_agenda(submitter).progress
    columns = _operation_columns(progress, ["a", "b", "c"]) | {column: values}

    insert_columns(OperationProgress, columns, now=timezone.now())

    rows = OperationProgress.objects.filter(agenda_progress=progress, position__gte=10)
    stored = [getattr(row, column) for row in rows.order_by("position")]
    assert [repr(value) for value in stored] == [repr(value) for value in values]


def test_rows_whose_every_column_holds_one_value_are_each_written(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    now = timezone.now()
    one_row = {
        "agenda_id": agenda.pk,
        "customer_id": agenda.customer_id,
        "url": "https://h.example/x",
        "event": "succeeded",
        "body": {"same": True},
        "next_attempt_at": now,
    }

    inserted = insert_columns(
        CallbackDelivery, {name: [value] * 3 for name, value in one_row.items()}, now=now
    )

    rows = CallbackDelivery.objects.filter(agenda=agenda, event="succeeded")
    assert inserted == 3
    assert [(row.url, row.body) for row in rows] == [("https://h.example/x", {"same": True})] * 3


def test_a_ready_row_written_from_columns_keeps_its_given_time(submitter, submit_agenda):
    agenda = submit_agenda(submitter, do_not_run=True)  # pending: no ready row of its own
    added_at = timezone.now() - timedelta(hours=1)

    insert_columns(
        ReadyAgenda,
        {
            "agenda_id": [agenda.pk],
            "insight_id": [agenda.insight_id],
            "customer_id": [agenda.customer_id],
            "priority": [7],
            "added_at": [added_at],
        },
        now=timezone.now(),
    )

    row = ReadyAgenda.objects.get(agenda=agenda)
    assert (row.customer_id, row.priority, row.added_at) == (agenda.customer_id, 7, added_at)


def test_no_rows_send_no_statement():
    with CaptureQueriesContext(connection) as captured:
        assert (
            insert_columns(ReadyAgenda, {"agenda_id": [], "priority": []}, now=timezone.now()) == 0
        )

    assert captured.captured_queries == []


def test_columns_of_unequal_length_are_refused_and_nothing_is_written(submitter, submit_agenda):
    progress = submit_agenda(submitter).progress
    before = OperationProgress.objects.count()
    columns = _operation_columns(progress, ["a", "b"]) | {"type": ["noop"]}

    with pytest.raises(ValueError, match="unequal length"):
        insert_columns(OperationProgress, columns, now=timezone.now())

    assert OperationProgress.objects.count() == before


def test_a_field_the_model_does_not_have_is_refused_and_nothing_is_written(
    submitter, submit_agenda
):
    progress = submit_agenda(submitter).progress
    before = OperationProgress.objects.count()
    columns = _operation_columns(progress, ["a"]) | {"colour": ["red"]}

    with pytest.raises(ValueError, match="no fields"):
        insert_columns(OperationProgress, columns, now=timezone.now())

    assert OperationProgress.objects.count() == before


def test_a_bulk_submits_progress_instances_are_the_rows_it_wrote(submitter, operations, insight):
    from agendas.models import AgendaProgress
    from agendas.services import agendas_submit_many

    items = [{"operations": operations, "customer": submitter.customer}] * 3
    items.append({"operations": operations, "customer": submitter.customer, "do_not_run": True})

    agendas = agendas_submit_many(principal=submitter.user, items=items)

    for agenda in agendas:
        progress = agenda.progress
        stored = AgendaProgress.objects.get(pk=progress.pk)
        assert model_to_dict(progress) == model_to_dict(stored)
        assert (progress.created_at, progress.updated_at) == (stored.created_at, stored.updated_at)
        assert progress._state.adding is False
    assert [agenda.progress.state for agenda in agendas] == ["ready"] * 3 + ["pending"]
    progress = agendas[0].progress
    progress.message = "saved again"
    progress.save(update_fields=["message"])  # an instance the ORM knows is stored
    assert AgendaProgress.objects.get(pk=progress.pk).message == "saved again"


def test_a_bulk_submits_agendas_are_the_rows_it_wrote(submitter, operations, insight):
    from agendas.models import Agenda
    from agendas.services import agendas_submit_many

    items = [
        {
            "operations": operations,
            "customer": submitter.customer,
            "labels": {"batch": "7"},
            "external_id": f"ext-{n}",
            "priority": n,
        }
        for n in range(1, 4)
    ]

    agendas = agendas_submit_many(principal=submitter.user, items=items)

    for agenda in agendas:
        stored = Agenda.objects.get(pk=agenda.pk)
        assert model_to_dict(agenda) == model_to_dict(stored)
        assert (agenda.created_at, agenda.updated_at) == (stored.created_at, stored.updated_at)
        assert agenda._state.adding is False
    assert [stored.priority for stored in Agenda.objects.order_by("priority")] == [1, 2, 3]
    assert Agenda.objects.get(external_id="ext-2").labels == {"batch": "7"}


def test_a_value_longer_than_its_column_is_refused_not_cut_short(submitter, submit_agenda):
    from django.db import DataError, transaction

    progress = submit_agenda(submitter).progress
    before = OperationProgress.objects.count()

    with pytest.raises(DataError), transaction.atomic():
        insert_columns(
            OperationProgress, _operation_columns(progress, ["n" * 101]), now=timezone.now()
        )

    assert OperationProgress.objects.count() == before


def test_a_bulk_submit_whose_every_item_fails_writes_nothing_and_answers_each(submitter, insight):
    from agendas.models import Agenda
    from agendas.services import agendas_submit_many

    results = agendas_submit_many(
        principal=submitter.user,
        items=[
            {"operations": [{"name": "x", "type": "no-such-type"}], "customer": submitter.customer}
        ],
    )

    assert isinstance(results[0], dict)
    assert not Agenda.objects.exists()
