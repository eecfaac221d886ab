"""Model instances from the rows of hand-written SQL, for the hot paths (pull and report).

The pull claims with one data-modifying statement and a report locks its rows with one join;
both hand their rows to `RowLoader`s rather than to a second ORM query; so do the reads every
API request makes (its token, the caller's memberships, the pulled insight). Why not the ORM:
a report's lock needs an inner join to the progress row that `select_related` writes as an
outer join (which PostgreSQL refuses to lock), and building the ORM's compiler and converters
on every call measured 20-30% fewer agendas/s at claim-1 and claim-10 (bench.compare
--phases engine, 2026-11-24: 190/320 against 235/480). A loader is built once per process.
"""

from django.db import connection


class RowLoader:
    """Instances of `model` from a raw row's columns, with the ORM's value converters applied.

    `columns` are the model's columns (or the `attnames` asked for) qualified by `alias`, in
    the order `load` expects them.
    """

    def __init__(self, model, alias: str, attnames: frozenset[str] | None = None) -> None:
        self.model = model
        self.fields = [
            model_field
            for model_field in model._meta.concrete_fields
            if attnames is None or model_field.attname in attnames
        ]
        self.attnames = [model_field.attname for model_field in self.fields]
        self.columns = [f"{alias}.{connection.ops.quote_name(f.column)}" for f in self.fields]
        self.converters = []
        for position, model_field in enumerate(self.fields):
            column = model_field.get_col(alias)
            found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if found:
                self.converters.append((position, column, found))

    def load(self, values: list):
        for position, column, converters in self.converters:
            for converter in converters:
                values[position] = converter(values[position], column, connection)
        return self.model.from_db(connection.alias, self.attnames, values)


def load_row(loaders: list[RowLoader], row: tuple) -> list:
    """One instance per loader from consecutive slices of `row`."""
    instances, start = [], 0
    for loader in loaders:
        end = start + len(loader.fields)
        instances.append(loader.load(list(row[start:end])))
        start = end
    return instances
