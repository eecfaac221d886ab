"""Instances built from hand-written rows (core/rows.py) are the instances the ORM builds:
the same values, known to be stored, saved as an update; a model whose construction does
more than set its fields goes through `Model.from_db`."""

import pytest
from django.db import connection
from django.db.models import signals
from django.forms.models import model_to_dict

from agendas.models import AgendaProgress, Execution
from core.rows import RowLoader, load_row

pytestmark = pytest.mark.django_db


def _rows(loaders, sql_tail: str, params) -> list[tuple]:
    columns = ", ".join(column for loader in loaders for column in loader.columns)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} {sql_tail}", params)
        return cursor.fetchall()


def test_a_loaded_row_equals_the_orms_instance_and_saves_as_an_update(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    loader = RowLoader(AgendaProgress, "p")
    table = connection.ops.quote_name(AgendaProgress._meta.db_table)

    (row,) = _rows([loader], f"FROM {table} p WHERE p.agenda_id = %s", [agenda.pk])
    (loaded,) = load_row([loader], row)

    assert loader.direct
    stored = AgendaProgress.objects.get(agenda=agenda)
    assert model_to_dict(loaded) == model_to_dict(stored)
    assert (loaded.created_at, loaded.updated_at) == (stored.created_at, stored.updated_at)
    assert loaded._state.adding is False and loaded._state.db == "default"
    assert loaded.agenda == agenda  # the foreign key resolves from its id
    loaded.message = "loaded and saved"
    loaded.save(update_fields=["message"])
    assert AgendaProgress.objects.filter(agenda=agenda).count() == 1
    assert AgendaProgress.objects.get(agenda=agenda).message == "loaded and saved"


def test_a_loader_of_some_columns_leaves_the_others_deferred(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    loader = RowLoader(AgendaProgress, "p", frozenset({"id", "state"}))
    table = connection.ops.quote_name(AgendaProgress._meta.db_table)

    (row,) = _rows([loader], f"FROM {table} p WHERE p.agenda_id = %s", [agenda.pk])
    (loaded,) = load_row([loader], row)

    assert loaded.get_deferred_fields() >= {"message", "agenda_id"}
    assert loaded.state == "ready"
    assert loaded.agenda_id == agenda.pk  # read on first use, as the ORM's deferred fields are


def test_a_model_with_an_init_receiver_is_built_through_from_db(submitter, submit_agenda):
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance.pk)

    signals.post_init.connect(receiver, sender=Execution)
    try:
        loader = RowLoader(Execution, "e")
    finally:
        signals.post_init.disconnect(receiver, sender=Execution)
    plain = RowLoader(Execution, "e")

    assert not loader.direct
    assert plain.direct


JSON_DOCUMENTS = [
    {},
    [],
    'text ü " \\ \n 😀',
    {"big": 123456789012345678901234567890, "neg": -(2**70), "float": 100 / 3, "tiny": 5e-324},
    {"nested": [[[{"a": [1, 2.5, -0.0, True, False, None]}]]], "order": {"z": 1, "a": 2}},
]


@pytest.mark.parametrize("document", JSON_DOCUMENTS, ids=range(len(JSON_DOCUMENTS)))
def test_a_loaded_json_field_equals_the_orms_value(submitter, submit_agenda, document):
    agenda = submit_agenda(submitter)
    AgendaProgress.objects.filter(agenda=agenda).update(diagnostics=document)
    loader = RowLoader(AgendaProgress, "p")
    table = connection.ops.quote_name(AgendaProgress._meta.db_table)

    (row,) = _rows([loader], f"FROM {table} p WHERE p.agenda_id = %s", [agenda.pk])
    (loaded,) = load_row([loader], row)

    stored = AgendaProgress.objects.get(agenda=agenda).diagnostics
    assert loaded.diagnostics == stored == document
    assert repr(loaded.diagnostics) == repr(stored)  # the same types, down to -0.0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="jsonb's own numbers")
def test_a_json_number_past_a_floats_range_loads_as_the_orm_loads_it(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    table = connection.ops.quote_name(AgendaProgress._meta.db_table)
    # jsonb keeps numbers as `numeric`: these come back as written, past what a float holds.
    past = "1" + "0" * 400 + ".5"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET diagnostics = %s::jsonb WHERE agenda_id = %s",
            [f"[{past}, -{past}, 1e400, 1e-400, 1]", agenda.pk],
        )
    loader = RowLoader(AgendaProgress, "p")

    (row,) = _rows([loader], f"FROM {table} p WHERE p.agenda_id = %s", [agenda.pk])
    (loaded,) = load_row([loader], row)

    assert loaded.diagnostics == AgendaProgress.objects.get(agenda=agenda).diagnostics
    assert loaded.diagnostics == [float("inf"), float("-inf"), 10**400, 0.0, 1]
