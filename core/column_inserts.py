"""Rows inserted from columns of values, without a model instance per row: the submit's
set-based INSERTs on its hot path (the operations of every new agenda, its ready row).

`bulk_create` builds an instance per row and prepares every field of every row in Python
(a bulk submit of 100 spent a tenth of the web's CPU in those two inserts: bench.profile, py-spy
on gunicorn, 2026-11-26). `insert_columns` sends the columns that vary between its rows as rows
of one JSON text, a column holding one value in every row once, as a parameter (a bulk
submit's customer and insight, most of its options, its operations' names and types), and lets
every other column take its model default once per statement — the same values a
`save()` would write, because they come from the same fields (`Field.get_default`,
`auto_now`/`auto_now_add`). On PostgreSQL that is one `INSERT … SELECT … FROM
jsonb_array_elements(…)` over the rows sent as one JSON text (`core/column_rows.py`);
elsewhere (the SQLite demo) it falls back to `bulk_create`.
"""

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime

import msgspec
from django.db import DEFAULT_DB_ALIAS, connection, connections

from core.column_rows import ROWS_SOURCE, cell_sql, rows_parameters
from core.column_values import column_values, unbounded_type


def insert_columns(model, columns: dict[str, Sequence], *, now: datetime) -> int:
    """INSERT one `model` row per position of the `columns` lists (keyed by attname, all the
    same length); every other field takes its default, `auto_now`/`auto_now_add` fields
    `now`. A UUID primary key with a callable default gets a fresh random UUID per row.
    Returns the rows inserted."""
    lengths = {len(values) for values in columns.values()}
    if not lengths:
        return 0  # no columns: no rows
    if len(lengths) != 1:
        raise ValueError(f"columns of unequal length: {sorted(lengths)}")
    (count,) = lengths
    if not count:
        return 0
    names = tuple(columns)
    unknown = set(names) - _attnames(model)
    if unknown:
        raise ValueError(f"{model.__name__} has no fields {sorted(unknown)}")
    if connection.vendor != "postgresql":
        model.objects.bulk_create(
            model(**{name: columns[name][row] for name in names}) for row in range(count)
        )
        return count
    # A column holding one value in every row (a bulk submit's customer, its defaults, its
    # operations' names) goes once, as a parameter, not once per row in the rows' text.
    uniform: tuple[str, ...] = ()
    if count > 1:
        uniform = tuple(name for name in names if _one_value(columns[name]))
        if len(uniform) == len(names):
            uniform = uniform[1:]  # one column stays in the rows: they are what counts the rows
    sql, varying, constant = _statement(
        model, tuple(name for name in names if name not in uniform), uniform, connection.vendor
    )
    # The constants come first in the statement's text (its SELECT list), then the rows. The
    # connection itself, not its proxy, prepares them (core/column_values.py).
    database = connections[DEFAULT_DB_ALIAS]
    params = [now if field is None else value for field, value in constant(columns, database)]
    params += rows_parameters(varying, [columns[field.attname] for field in varying])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    return count


def insert_instances(model, instances: Sequence, *, now: datetime) -> None:
    """`bulk_create` of new `instances` (primary keys set), written from columns: each
    concrete field as the instance holds it, `auto_now`/`auto_now_add` fields `now`, on the
    rows and on the instances, which are then known to be stored (`_state.adding` False)."""
    if not instances:
        return
    if connection.vendor != "postgresql":
        model.objects.bulk_create(instances)  # stamps the rows and the instances alike
        return
    stamped = _stamped(model)
    insert_columns(
        model,
        {
            field.attname: [getattr(instance, field.attname) for instance in instances]
            for field in model._meta.concrete_fields
            if field.attname not in stamped
        },
        now=now,
    )
    for instance in instances:
        for attname in stamped:
            setattr(instance, attname, now)
        instance._state.adding, instance._state.db = False, connection.alias


@functools.cache
def _stamped(model) -> frozenset[str]:
    return frozenset(
        field.attname
        for field in model._meta.concrete_fields
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
    )


@functools.cache
def _attnames(model) -> frozenset[str]:
    return frozenset(field.attname for field in model._meta.concrete_fields)


def _one_value(values: Sequence) -> bool:
    """Whether every value would be stored as the first is. Values of a type whose equality
    is its stored form (None, a bool, an int, a str, a UUID) are compared; a float by its exact
    form (`0.0 == -0.0`); any other (a JSON document, where `{"a": 1} == {"a": True}`) by its
    JSON text, and a value that has none is a column of its own."""
    first = values[0]
    kind = type(first)
    if kind in _COMPARED:
        return all(type(value) is kind and value == first for value in values)
    if kind is float:  # by its exact form: -0.0, infinities and NaN kept apart
        text = first.hex()
        return all(type(value) is float and value.hex() == text for value in values)
    try:
        text = _JSON_TEXT(first)
        return all(type(value) is kind and _JSON_TEXT(value) == text for value in values)
    except (TypeError, msgspec.EncodeError):
        return False


_COMPARED = frozenset({type(None), bool, int, str, uuid.UUID})
_JSON_TEXT = msgspec.json.Encoder().encode


# Bounded: which columns hold one value is the caller's data, and a customer who varies it
# batch by batch must not grow this process's memory (psycopg bounds its prepared ones too).
@functools.lru_cache(maxsize=512)
def _statement(model, names: tuple[str, ...], uniform: tuple[str, ...], vendor: str):
    """The INSERT of `insert_columns` for these varying attnames and these of one value in
    every row, built once per process: its SQL, the varying fields (in parameter order) and a
    function giving the constant parameters from the columns (the uniform ones' value, as
    `get_db_prep_save` prepares it; defaults are called per statement: a `list` default is a
    fresh list)."""
    meta = model._meta
    by_attname = {field.attname: field for field in meta.concrete_fields}
    quote = connection.ops.quote_name
    varying = [by_attname[name] for name in names]
    targets, selected, constants = [], [], []
    pk = meta.pk
    given = set(names) | set(uniform)
    if pk.attname not in given and pk.get_internal_type() == "UUIDField" and pk.has_default():
        if pk.default is not uuid.uuid4:
            raise ValueError(f"{model.__name__}'s primary key default is not uuid4")
        targets.append(quote(pk.column))
        selected.append("gen_random_uuid()")
    for position, field in enumerate(varying):
        targets.append(quote(field.column))
        selected.append(cell_sql(position, field))
    given_once = [by_attname[name] for name in uniform]
    for field in given_once:
        targets.append(quote(field.column))
        selected.append(f"%s::{unbounded_type(field)}")
    for field in meta.concrete_fields:
        if field.attname in given or field.primary_key:
            continue
        if field.has_db_default() and not field.has_default():
            continue  # the database's own default, as `save()` leaves it to the database
        targets.append(quote(field.column))
        selected.append(f"%s::{unbounded_type(field)}")
        stamped = getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
        constants.append(None if stamped else field)
    sql = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(targets)}) "
        f"SELECT {', '.join(selected)} FROM {ROWS_SOURCE}"
    )

    def constant(columns: dict[str, Sequence], database) -> list:
        once = [
            (field, column_values(field, columns[field.attname][:1], database)[0])
            for field in given_once
        ]
        return once + [
            (None, None)
            if field is None
            else (field, field.get_db_prep_save(field.get_default(), database))
            for field in constants
        ]

    return sql, varying, constant
