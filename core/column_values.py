"""A column of values as the database takes it, for the set-based writes of the hot paths
(`core/column_inserts.py`, `core/column_updates.py`, through `core/column_rows.py`, which sends
the columns as rows of one JSON text, each cell cast to its field's column type).
"""

import functools
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime

from django.db import DEFAULT_DB_ALIAS, connection, connections, models


def column_values(field, values: Sequence, database=None) -> list:
    """`values` prepared as `field.get_db_prep_save` prepares them, for cells cast to the
    field's column type (`unbounded_type(field)`).

    A value that Django hands on as it is — a `str` for a text column, a `float`, a `bool`, a
    `UUID`, an aware `datetime`, None for any of them — skips the call (about 2.5 µs a value,
    a fifth of a report's CPU in process); so does an `int`, which Django only wraps to name
    its integer type, which the cell's cast names. Anything else, and every value of other
    fields (JSON, which Django wraps for psycopg), goes through `get_db_prep_save`."""
    handed_on = _handed_on(field)
    prepare = field.get_db_prep_save
    if handed_on is _is_int:
        prepare = _as_plain_int(prepare)
    # The connection itself, not the `connection` proxy: each of the proxy's attributes is a
    # look-up in a context-local mapping, and preparing a value reads several. A caller
    # preparing several columns passes it (`connections[…]` is such a look-up too).
    if database is None:
        database = connections[DEFAULT_DB_ALIAS]
    if handed_on is None:
        return [prepare(value, database) for value in values]
    return [
        value if value is None or handed_on(value) else prepare(value, database) for value in values
    ]


def _as_plain_int(prepare: Callable) -> Callable:
    """`prepare`, its integer unwrapped: Django wraps a prepared integer in psycopg's
    Int2/Int4/Int8, which psycopg will not put in one array with a plain int (and a set-based
    write wants one type per column)."""
    return lambda value, database: int(prepare(value, database))


def _is_aware_datetime(value) -> bool:
    return type(value) is datetime and value.utcoffset() is not None


def _is_int(value) -> bool:
    return type(value) is int


# Django's own field classes (exactly: a subclass may prepare differently) whose
# get_db_prep_save on PostgreSQL returns a value of this kind unchanged (or, for integers, in
# a wrapper that only names its type).
_HANDED_ON: dict[type, Callable[[object], bool]] = {
    **{
        kind: _is_int
        for kind in (
            models.AutoField,
            models.BigAutoField,
            models.SmallAutoField,
            models.IntegerField,
            models.BigIntegerField,
            models.SmallIntegerField,
            models.PositiveIntegerField,
            models.PositiveBigIntegerField,
            models.PositiveSmallIntegerField,
        )
    },
    models.FloatField: lambda value: type(value) is float,
    models.BooleanField: lambda value: type(value) is bool,
    models.CharField: lambda value: type(value) is str,
    models.TextField: lambda value: type(value) is str,
    models.UUIDField: lambda value: type(value) is uuid.UUID,
    models.DateTimeField: _is_aware_datetime,
}


@functools.cache
def _handed_on(field) -> Callable[[object], bool] | None:
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    if connection.vendor != "postgresql":
        return None
    return _HANDED_ON.get(type(target))


def unbounded_type(field) -> str:
    """The field's column type without its length (`varchar(100)` → `varchar`): an explicit
    cast to `varchar(100)` cuts a longer value short, where writing it into the column refuses
    it, as `bulk_create`'s and `save()`'s do."""
    return field.db_type(connection).split("(")[0]
