"""The operations of the agendas a pull claimed or a batch report locked, in one read.

Hand-written SQL into instances (core/rows.py), in the order the ORM's default gives
(progress, then position): both paths make this read for every ten agendas, and building
the ORM's query for it cost about as much as loading the rows.

The claim on PostgreSQL reads its agendas' operations in its own statement instead
(`pulled_operations_sql`, `pulled_operations_load`): each agenda's operations as one JSON
array of the fields a pull's answer carries, loaded into instances that hold only those.
"""

import functools
import json
from collections.abc import Iterable

from django.db import connection, models

from agendas.models import OperationProgress
from core.rows import RowLoader
from core.statement_text import among


def operations_of_progress(progress_ids: Iterable[object]) -> list[OperationProgress]:
    """Every operation of these progress rows, by progress id and then position."""
    ids = list(progress_ids)
    if not ids:
        return []
    loader, select, order = _operations_query(connection.vendor)
    prepare = OperationProgress._meta.get_field("agenda_progress").get_db_prep_value
    listed, parameters = among([prepare(pk, connection) for pk in ids])
    with connection.cursor() as cursor:
        cursor.execute(f"{select} {listed} {order}", parameters)
        rows = cursor.fetchall()
    return [loader.load(list(row)) for row in rows]


@functools.cache
def _operations_query(vendor: str) -> tuple[RowLoader, str, str]:
    """The loader, the statement up to its list of progress ids, and its ORDER BY."""
    loader = RowLoader(OperationProgress, "o")
    quote = connection.ops.quote_name
    table = quote(OperationProgress._meta.db_table)
    progress = quote(OperationProgress._meta.get_field("agenda_progress").column)
    position = quote(OperationProgress._meta.get_field("position").column)
    select = f"SELECT {', '.join(loader.columns)} FROM {table} o WHERE o.{progress}"
    return loader, select, f"ORDER BY o.{progress}, o.{position}"


# What a pull's answer shows of each operation, in the answer's order (the pull's serializer,
# `scheduling.api.puller_serializers.PulledOperationSerializer`, declares these fields).
PULLED_OPERATION_FIELDS = (
    "name",
    "type",
    "state",
    "percent_complete",
    "message",
    "attempt_count",
    "result",
    "params",
    "diagnostics",
    "is_generated",
)
# What the claim loads of each operation: those, its position, and the definition a generated
# operation runs with (`OperationProgress.generated_definition`).
PULLED_OPERATION_ATTNAMES = frozenset({*PULLED_OPERATION_FIELDS, "position", "definition"})


def pulled_operations_sql(progress_id: str) -> str:
    """A scalar subquery: the operations of the progress row `progress_id` (an SQL
    expression) as one JSON array, in position order, of `PULLED_OPERATION_ATTNAMES`'
    columns (a JSON field's document as its text, as the ORM reads it); NULL for none."""
    return _pulled_operations(connection.vendor)[1].format(progress_id=progress_id)


def pulled_operations_load(value: object) -> list[OperationProgress]:
    """The instances of what `pulled_operations_sql` read (its JSON, parsed or as text)."""
    if value is None:
        return []
    items = json.loads(value) if isinstance(value, str) else value
    loader = _pulled_operations(connection.vendor)[0]
    return [loader.load(list(item)) for item in items]


@functools.cache
def _pulled_operations(vendor: str) -> tuple[RowLoader, str]:
    loader = RowLoader(OperationProgress, "o", PULLED_OPERATION_ATTNAMES)
    quote = connection.ops.quote_name
    cells = [
        f"{column}::text" if isinstance(field, models.JSONField) else column
        for field, column in zip(loader.fields, loader.columns, strict=True)
    ]
    progress = quote(OperationProgress._meta.get_field("agenda_progress").column)
    position = quote(OperationProgress._meta.get_field("position").column)
    sql = (
        f"(SELECT json_agg(json_build_array({', '.join(cells)}) ORDER BY o.{position}) "
        f"FROM {quote(OperationProgress._meta.db_table)} o "
        f"WHERE o.{progress} = {{progress_id}})"
    )
    return loader, sql
