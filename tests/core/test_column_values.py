"""The values handed on without Django's preparation (core/column_values.py) are the ones
`get_db_prep_save` would send; everything else goes through Django."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, models

from core.column_values import column_values

AWARE = datetime(2026, 11, 27, 1, 2, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "values"),
    [
        (models.CharField(max_length=10), ["a", "", None, 5]),
        (models.TextField(), ["long text", None]),
        (models.FloatField(), [1.5, None, 2]),
        (models.BooleanField(), [True, False, None]),
        (models.UUIDField(), [uuid.uuid4(), None, str(uuid.uuid4())]),
        (models.DateTimeField(), [AWARE, AWARE + timedelta(days=1), None]),
    ],
    ids=["char", "text", "float", "bool", "uuid", "datetime"],
)
def test_values_handed_on_as_they_are_equal_what_django_prepares(field, values):
    assert column_values(field, values) == [
        field.get_db_prep_save(value, connection) for value in values
    ]


def test_integers_are_handed_on_and_anything_else_goes_through_django_to_a_plain_int():
    field = models.PositiveSmallIntegerField()
    prepared = column_values(field, [3, None, "4"])

    assert prepared[:2] == [3, None] and type(prepared[0]) is int
    assert prepared[2] == field.get_db_prep_save("4", connection) == 4
    # Not Django's Int2 wrapper: psycopg puts no wrapped and plain ints in one array.
    assert type(prepared[2]) is int


def test_json_values_go_through_django_which_wraps_them_for_psycopg():
    field = models.JSONField(null=True)
    none, value = column_values(field, [None, {"a": [1]}])

    assert none is None  # SQL NULL, as Django sends None for a JSONField
    assert type(value) is type(field.get_db_prep_save({"a": [1]}, connection))
    assert value.obj == {"a": [1]}


def test_a_subclass_of_a_django_field_goes_through_its_own_preparation():
    class Shouting(models.CharField):
        def get_prep_value(self, value):
            return super().get_prep_value(value).upper()

    assert column_values(Shouting(max_length=10), ["quiet"]) == ["QUIET"]
