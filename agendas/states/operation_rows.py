"""The operations of the agendas a pull claimed or a batch report locked, in one read.

Hand-written SQL into instances (core/rows.py), in the order the ORM's default gives
(progress, then position): both paths make this read for every ten agendas, and building
the ORM's query for it cost about as much as loading the rows.
"""

import functools
from collections.abc import Iterable

from django.db import connection

from agendas.models import OperationProgress
from core.rows import RowLoader


def operations_of_progress(progress_ids: Iterable[object]) -> list[OperationProgress]:
    """Every operation of these progress rows, by progress id and then position."""
    ids = list(progress_ids)
    if not ids:
        return []
    loader, select, order = _operations_query(connection.vendor)
    prepare = OperationProgress._meta.get_field("agenda_progress").get_db_prep_value
    sql = f"{select} IN ({', '.join(['%s'] * len(ids))}) {order}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [prepare(pk, connection) for pk in ids])
        rows = cursor.fetchall()
    return [loader.load(list(row)) for row in rows]


@functools.cache
def _operations_query(vendor: str) -> tuple[RowLoader, str, str]:
    """The loader, the statement up to its `IN (…)` and its ORDER BY."""
    loader = RowLoader(OperationProgress, "o")
    quote = connection.ops.quote_name
    table = quote(OperationProgress._meta.db_table)
    progress = quote(OperationProgress._meta.get_field("agenda_progress").column)
    position = quote(OperationProgress._meta.get_field("position").column)
    select = f"SELECT {', '.join(loader.columns)} FROM {table} o WHERE o.{progress}"
    return loader, select, f"ORDER BY o.{progress}, o.{position}"
