"""Rows updated from columns of values: the batch report's set-based UPDATEs on its hot path
(operations, executions and progress rows written back after a report of many agendas).

An `UPDATE … FROM (VALUES (%s, …), …)` sends a placeholder per cell: the report of ten
agendas' operations is 110 of them, past psycopg's cache of converted statements (at most 50
parameters), so psycopg scanned and rebuilt the statement's text at every report — 15% of the
CPU of a pull of 10 and its batch report in process (cProfile, 2026-11-27). `update_instances`
sends the rows as one JSON text (`core/column_rows.py`): a statement whose text and parameter
count do not depend on the rows, converted once per process, and one parameter that msgspec's
encoder writes. `update_instances_together` sends the UPDATEs of several models as one
statement. Off PostgreSQL (the SQLite demo) each is a `bulk_update`.
"""

import functools
from collections.abc import Sequence

from django.db import connection
from django.utils import timezone

from core.column_rows import ROWS_SOURCE, cell_sql, rows_parameters


def update_instances(model, instances: Sequence, attnames: Sequence[str]) -> None:
    """UPDATE each instance's row, by primary key, to the instance's values of `attnames`
    and a fresh time in every `auto_now` field (set on the instances too, as `save()` sets
    it), in one statement."""
    update_instances_together([(model, instances, attnames)])


def update_instances_together(updates: Sequence[tuple[type, Sequence, Sequence[str]]]) -> None:
    """`update_instances` for the instances of several models, (model, instances, attnames)
    each, in one statement: every UPDATE but the last is a data-modifying `WITH` query of the
    last, which PostgreSQL runs once and to completion whether or not anything reads it. The
    batch report writes its operations, executions and progress rows so, in one round trip
    instead of three. Models without instances are left out; each model once."""
    updates = [(model, instances, attnames) for model, instances, attnames in updates if instances]
    if len({model for model, _, _ in updates}) < len(updates):
        # Two UPDATEs of one table in one statement: PostgreSQL keeps one of a row's two writes.
        raise ValueError("update_instances_together takes each model once")
    if not updates:
        return
    stamp = timezone.now()
    statements, params = [], []
    for model, instances, attnames in updates:
        stamped = _auto_now(model)
        for instance in instances:
            for attname in stamped:
                setattr(instance, attname, stamp)
        names = tuple(name for name in attnames if name not in stamped) + stamped
        if connection.vendor != "postgresql":
            model.objects.bulk_update(instances, list(names))
            continue
        sql, fields = _statement(model, names, connection.vendor)
        statements.append(sql)
        params += rows_parameters(
            fields,
            [[getattr(instance, field.attname) for instance in instances] for field in fields],
        )
    if not statements:
        return
    *first, last = statements
    with_queries = ", ".join(f"u{number} AS ({sql})" for number, sql in enumerate(first))
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {with_queries} {last}" if first else last, params)


@functools.cache
def _auto_now(model) -> tuple[str, ...]:
    return tuple(
        field.attname for field in model._meta.concrete_fields if getattr(field, "auto_now", False)
    )


@functools.cache
def _statement(model, names: tuple[str, ...], vendor: str) -> tuple[str, list]:
    """`UPDATE t SET c = v.c, … FROM (SELECT <cell 0> AS pk, <cell 1> AS c, … FROM
    <the rows>) AS v WHERE t.pk = v.pk` for these attnames, and its
    fields in the rows' cell order (the primary key first): built once per process."""
    meta = model._meta
    by_attname = {field.attname: field for field in meta.concrete_fields}
    unknown = set(names) - set(by_attname)
    if unknown:
        raise ValueError(f"{model.__name__} has no fields {sorted(unknown)}")
    fields = [meta.pk, *(by_attname[name] for name in names)]
    quote = connection.ops.quote_name
    columns = [quote(field.column) for field in fields]
    assignments = ", ".join(f"{column} = v.{column}" for column in columns[1:])
    cells = ", ".join(
        f"{cell_sql(position, field)} AS {column}"
        for position, (field, column) in enumerate(zip(fields, columns, strict=True))
    )
    sql = (
        f"UPDATE {quote(meta.db_table)} AS t SET {assignments} "
        f"FROM (SELECT {cells} FROM {ROWS_SOURCE}) AS v WHERE t.{columns[0]} = v.{columns[0]}"
    )
    return sql, fields
