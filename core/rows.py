"""Model instances from the rows of hand-written SQL, for the hot paths (pull and report).

The pull claims with one data-modifying statement and a report locks its rows with one join;
both hand their rows to `RowLoader`s rather than to a second ORM query; so do the reads every
API request makes (its token, the caller's memberships, the pulled insight). Why not the ORM:
a report's lock needs an inner join to the progress row that `select_related` writes as an
outer join (which PostgreSQL refuses to lock), and building the ORM's compiler and converters
on every call measured 20-30% fewer agendas/s at claim-1 and claim-10 (bench.compare
--phases engine, 2026-11-24: 190/320 against 235/480). A loader is built once per process.

A loader builds its instances the way `Model.from_db` does, less the work that does nothing
for these models: it fills the instance's attributes directly instead of calling
`Model.__init__` (a tenth of a pull's and a report's web CPU in py-spy, 2026-11-26), and
says so only for a model whose construction has no side to skip — no `__init__` or `from_db`
of its own, no receiver of `pre_init`/`post_init`, no field attribute with a setter other than
a foreign key id's (whose setter only drops a cached related object, which a new instance has
not got). Any other model goes through `from_db`.
"""

import msgspec
from django.db import connection
from django.db.models import JSONField, Model, signals
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute


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
            found = [_json_converter(model_field, converter) for converter in found]
            if found:
                self.converters.append((position, column, found))
        self.direct = builds_plainly(model, self.attnames)
        # `connection` is a proxy whose every attribute is a look-up in a context-local
        # mapping: the alias is read once here, not at every row (it never changes).
        self.alias = connection.alias

    def load(self, values: list):
        for position, column, converters in self.converters:
            for converter in converters:
                values[position] = converter(values[position], column, connection)
        if not self.direct:
            return self.model.from_db(self.alias, self.attnames, values)
        instance = self.model.__new__(self.model)
        instance.__dict__.update(zip(self.attnames, values, strict=True))
        state = instance._state = ModelState()
        state.adding, state.db = False, self.alias
        return instance


_JSON = msgspec.json.Decoder()


def _json_converter(field, converter):
    """`converter`, or for a plain JSONField's own `from_db_value` one that parses the
    document with msgspec: the same values as `json.loads` (a fifth of its time), and the
    field's own converter where msgspec refuses the text (a number past a float's range,
    which `json.loads` reads as infinity)."""
    plain = type(field) is JSONField and field.decoder is None
    if not plain or getattr(converter, "__func__", None) is not JSONField.from_db_value:
        return converter

    def from_db_value(value, expression, connection):
        if value is None:
            return None
        try:
            return _JSON.decode(value)
        except (msgspec.DecodeError, TypeError):
            return converter(value, expression, connection)

    return from_db_value


def builds_plainly(model, attnames: list[str]) -> bool:
    """Whether `Model.from_db` on `model` does nothing but set these attributes (see the
    module docstring): then `RowLoader.load` may set them itself."""
    if model.__init__ is not Model.__init__ or model.from_db.__func__ is not Model.from_db.__func__:
        return False
    if signals.pre_init.has_listeners(model) or signals.post_init.has_listeners(model):
        return False
    for attname in attnames:
        descriptor = getattr(model, attname, None)
        if hasattr(descriptor, "__set__") and not isinstance(
            descriptor, ForeignKeyDeferredAttribute
        ):
            return False
    return True


def relate_one_way(instance: Model, name: str, related: Model) -> None:
    """`instance.<name> = related` for a one-to-one field, without caching `instance` on
    `related` in return (what the field's descriptor also does).

    The two caches make a reference cycle: the pair, their states and what hangs on them are
    then freed by the cyclic collector, not when the request lets go of them, and each of its
    passes holds every thread of the worker. A pull of 10 and its batch report left 20 such
    pairs with their executions, customers and insights: 62% of the objects the two requests
    left to the collector (tests/api/test_cyclic_garbage.py). Only for a caller that never
    reads the reverse side (`related.<related_name>`), which would query the database again.
    """
    field = instance._meta.get_field(name)
    setattr(instance, field.attname, related.pk)
    field.set_cached_value(instance, related)


def cache_reverse_one_way(instance: Model, name: str, related: Model) -> None:
    """`instance.<name>` answers `related` (the reverse side of a one-to-one: `related` points
    at `instance`), without `related` caching `instance` in return — the cycle
    `relate_one_way` avoids, from the other end. `related` must already carry `instance`'s
    key; reading `related.<its field>` then queries the database."""
    instance._meta.get_field(name).set_cached_value(instance, related)


def select_list(loaders) -> str:
    """The loaders' columns, in order, as a SELECT list: the rows `load_row` reads."""
    return ", ".join(column for loader in loaders for column in loader.columns)


def load_row(loaders: list[RowLoader], row: tuple) -> list:
    """One instance per loader from consecutive slices of `row` (columns after the loaders'
    are left to the caller)."""
    instances, start = [], 0
    for loader in loaders:
        end = start + len(loader.fields)
        instances.append(loader.load(list(row[start:end])))
        start = end
    return instances
