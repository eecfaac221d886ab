"""Rows of prepared values sent as one JSON parameter, for the set-based writes of the hot paths
(`core/column_inserts.py`, `core/column_updates.py`), and the SQL that reads each cell back as
its column's type.

One array parameter per column left psycopg to quote every value of every array in Python
(client-side binding: a value's dumper, then a regex escape per element, twice over for a JSON
value, an encoded document inside an array literal): 3.1 ms of the web's CPU for the 100 rows
of a bulk submit's agendas, against 0.06 ms for one JSON text that the C encoder writes. The
database reads it with `jsonb_array_elements`, casting each cell with its column type's own
input function, for less of its CPU than `unnest` over the arrays took (0.33–0.47 against
0.57–0.90 ms for those 100 rows; docs/decisions.md, "Set-based writes send their rows as one
JSON document").

Each value is first prepared as `column_values` prepares it (as `get_db_prep_save` would),
then written in the form its type's input function reads back exactly: a UUID, a date or a
time as its ISO text (msgspec writes those itself), a float that JSON has no number for as
`NaN`/`Infinity`, a JSON field's document inside a one-element array, so that SQL NULL
(`None`) and a JSON `null` document stay apart. msgspec's encoder writes the text: a sixth of
the standard library's time for a report's rows, UUIDs and times included, which it writes
without a Python call each.
"""

import json
import math
import uuid
from collections.abc import Callable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal

import msgspec
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.types.json import Json, Jsonb

from core.column_values import column_values, unbounded_type

# The rows, one `r` (a JSON array of cells) each. The LIMIT is the number of rows: with it the
# planner knows how many there are, as it knew the length of a literal array, and joins an
# UPDATE's rows to their table by its primary key index (without it, it guessed 100 rows and
# hashed a seq scan of the whole table: a cost that grew with the history).
ROWS_SOURCE = "(SELECT r FROM jsonb_array_elements(%s::jsonb) AS r LIMIT %s) AS sent"


def rows_parameters(fields: Sequence, columns: Sequence[Sequence]) -> list:
    """The parameters of `ROWS_SOURCE` for `columns` (one list of values per field, all the
    same length): the JSON text of the rows, `[[cell, …], …]`, each cell as `cell_sql` reads
    it back, and their number."""
    database = connections[DEFAULT_DB_ALIAS]
    prepared = [
        [_json_form(value) for value in column_values(field, values, database)]
        for field, values in zip(fields, columns, strict=True)
    ]
    rows = [list(row) for row in zip(*prepared, strict=True)]
    return [_ENCODER.encode(rows).decode(), len(rows)]


def cell_sql(position: int, field) -> str:
    """The expression reading cell `position` of a row `r` of `ROWS_SOURCE` as `field`'s
    column type (unbounded: a value too long for its column is refused, not cut short)."""
    column_type = unbounded_type(field)
    if column_type == "jsonb":
        # The document out of its array; a null cell (SQL NULL) stays SQL NULL.
        return f"(NULLIF(r->{position}, 'null'::jsonb)->0)"
    return f"(r->>{position})::{column_type}"


_ENCODER = msgspec.json.Encoder()


def _json_form(value):
    kind = type(value)
    if value is None or kind is str or kind is int or kind is bool:
        return value
    convert = _CONVERSIONS.get(kind)
    if convert is None:
        convert = next(
            (found for base, found in _CONVERSIONS.items() if isinstance(value, base)), None
        )
        if convert is None:
            raise TypeError(f"no JSON form for a prepared {kind.__name__} value")
        # A subclass (a state's choices enum, in every progress row) is looked up once.
        _CONVERSIONS[kind] = convert
    return convert(value)


def _float(value: float):
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _json_document(wrapper: Json | Jsonb) -> list:
    """Django wraps a JSON field's value for psycopg with the field's encoder (`dumps`); the
    plain `json.dumps` writes the document as it is, any other is applied and read back."""
    if wrapper.dumps in (None, json.dumps):
        return [wrapper.obj]
    return [json.loads(wrapper.dumps(wrapper.obj))]


def _interval(value: timedelta) -> str:
    return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"


def _as_is(value):
    return value


_CONVERSIONS: dict[type, Callable] = {
    float: _float,
    # Written by the encoder in the forms PostgreSQL's input functions read: 8-4-4-4-12 hex,
    # ISO 8601 (a UTC time with `Z`).
    uuid.UUID: _as_is,
    datetime: _as_is,
    date: _as_is,
    time: _as_is,
    timedelta: _interval,
    Decimal: str,
    Jsonb: _json_document,
    Json: _json_document,
    # Subclasses (a choices enum, psycopg's Int4): their content, as psycopg would dump it.
    str: str.__str__,
    int: int.__int__,
}
