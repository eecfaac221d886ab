"""Rows sent as one JSON text (core/column_rows.py) read back, cell by cell, as the database reads
the same values sent one by one the way Django sends them."""

import math
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DataError, connection, models, transaction
from django.db.models import Value

from core.column_rows import ROWS_SOURCE, cell_sql, rows_parameters
from core.column_values import unbounded_type

pytestmark = pytest.mark.django_db

AWARE = datetime(2026, 11, 27, 1, 2, 3, 456789, tzinfo=UTC)

CASES = [
    (
        "text",
        models.TextField(null=True),
        ["plain", "", None, 'quote " back\\slash {braces}, comma', "line\nbreak\ttab", "ünï—码"],
    ),
    ("varchar", models.CharField(max_length=200, null=True), ["a", None, "NULL", "null"]),
    ("integer", models.IntegerField(null=True), [0, -5, 2**31 - 1, None]),
    ("bigint", models.BigIntegerField(), [2**62, -(2**62)]),
    (
        "float",
        models.FloatField(null=True),
        [0.1, 1 / 3, 1e-7, 1e300, -0.0, 5.0, None, math.inf, -math.inf],
    ),
    ("bool", models.BooleanField(null=True), [True, False, None]),
    ("uuid", models.UUIDField(null=True), [uuid.uuid4(), None]),
    ("datetime", models.DateTimeField(null=True), [AWARE, AWARE.replace(microsecond=0), None]),
    ("date", models.DateField(null=True), [date(2026, 2, 28), None]),
    ("decimal", models.DecimalField(max_digits=12, decimal_places=4), [Decimal("12.3456")]),
    ("duration", models.DurationField(), [timedelta(days=2, seconds=5, microseconds=7)]),
    (
        "json",
        models.JSONField(null=True),
        [
            {"a": [1, 2.5, None, True], "quote": '"', "ü": "码"},
            [],
            "a string document",
            0,
            None,  # SQL NULL
            Value(None, models.JSONField()),  # a JSON null document
        ],
    ),
    ("json, Django's encoder", models.JSONField(encoder=DjangoJSONEncoder), [{"at": AWARE}]),
]


def _read_back(field, values) -> list:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {cell_sql(0, field)} FROM {ROWS_SOURCE}",
            rows_parameters([field], [values]),
        )
        return [row[0] for row in cursor.fetchall()]


def _sent_one_by_one(field, values) -> list:
    found = []
    with connection.cursor() as cursor:
        for value in values:
            cursor.execute(
                f"SELECT %s::{unbounded_type(field)}",
                [field.get_db_prep_save(value, connection)],
            )
            found.append(cursor.fetchone()[0])
    return found


@pytest.mark.parametrize(
    ("field", "values"), [case[1:] for case in CASES], ids=[c[0] for c in CASES]
)
def test_every_cell_reads_back_as_the_value_sent_alone(field, values):
    assert _read_back(field, values) == _sent_one_by_one(field, values)


def test_sql_null_and_a_json_null_document_stay_apart():
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {cell_sql(0, models.JSONField())} IS NULL FROM {ROWS_SOURCE}",
            rows_parameters([models.JSONField()], [[None, Value(None, models.JSONField())]]),
        )
        assert [row[0] for row in cursor.fetchall()] == [True, False]


def test_a_float_json_has_no_number_for_is_read_back():
    (nan,) = _read_back(models.FloatField(), [math.nan])

    assert math.isnan(nan)


def test_several_columns_make_one_row_per_position_in_order():
    fields = [models.IntegerField(), models.TextField(), models.JSONField()]
    params = rows_parameters(fields, [[1, 2], ["one", "two"], [{"n": 1}, None]])
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {', '.join(cell_sql(n, field) for n, field in enumerate(fields))} "
            f"FROM {ROWS_SOURCE}",
            params,
        )
        # Django reads jsonb as its text (JSONField.from_db_value decodes it)
        assert cursor.fetchall() == [(1, "one", '{"n": 1}'), (2, "two", None)]


def test_columns_of_unequal_length_are_refused():
    with pytest.raises(ValueError):
        rows_parameters([models.IntegerField(), models.IntegerField()], [[1, 2], [1]])


def test_a_value_the_column_cannot_hold_is_refused_not_cut_short():
    field = models.CharField(max_length=3)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE short_text (value varchar(3))")
        with pytest.raises(DataError), transaction.atomic():
            cursor.execute(
                f"INSERT INTO short_text (value) SELECT {cell_sql(0, field)} FROM {ROWS_SOURCE}",
                rows_parameters([field], [["abcdef"]]),
            )
        cursor.execute("SELECT count(*) FROM short_text")
        assert cursor.fetchone()[0] == 0


def test_a_value_without_a_json_form_is_refused_naming_its_type():
    class Opaque(models.Field):
        def get_db_prep_save(self, value, connection):
            return value

        def db_type(self, connection):
            return "bytea"

    with pytest.raises(TypeError, match="bytes"):
        rows_parameters([Opaque()], [[b"\x00\x01"]])
