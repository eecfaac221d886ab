"""What the admin of every owned row shares, and what keeps the changelist of a big table fast.

A year of history is a million agendas, three million operation rows and an audit trail to
match. Django's admin defaults read all of it on every changelist: two full `COUNT(*)`, the
`date_hierarchy`'s MIN/MAX and `DISTINCT date_trunc`, `UPPER(col) LIKE '%term%'` searches and a
sidebar link for every customer. `BigTableAdmin` turns each of them into an indexed read
(docs/decisions.md, "The admin at scale").
"""

import operator
import re
import uuid
from functools import reduce
from typing import Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Field, Model, Q, QuerySet, UUIDField
from django.http import HttpRequest

from core.pagination import CappedCountPaginator

# Bookkeeping an operator rarely sets by hand: last on a form, not first.
BOOKKEEPING_FIELDS = ("link_id", "cid")

# A changelist counts at most 10,000 rows (core.pagination.CappedCountPaginator).
# A search or filter through a relation (customer slug, username) matches at most this many
# related rows; their keys go into the query as a list an index can serve.
RELATED_KEYS_CAP = 1000
BIGINT_MAX = 2**63 - 1
# The first 8+ hex digits of an id, as the pages show it: a range of the (indexed) key.
ID_PREFIX = re.compile(r"^[0-9a-fA-F-]{8,35}$")


class OwnedRowAdmin(admin.ModelAdmin):
    """A model admin whose form ends with the grouping `link_id` and correlation `cid`."""

    def get_fields(self, request: Any, obj: Any = None) -> list[str]:
        fields = list(super().get_fields(request, obj))
        return [name for name in fields if name not in BOOKKEEPING_FIELDS] + [
            name for name in BOOKKEEPING_FIELDS if name in fields
        ]

    def get_fieldsets(self, request: Any, obj: Any = None) -> list[tuple[str | None, dict]]:
        """The row's name first; `link_id` and `cid` in a collapsed "Tracking" section last."""
        if self.fieldsets:
            return list(self.fieldsets)
        fields = self.get_fields(request, obj)
        first = [name for name in ("name",) if name in fields]
        main = first + [n for n in fields if n not in first and n not in BOOKKEEPING_FIELDS]
        tracking = [name for name in fields if name in BOOKKEEPING_FIELDS]
        fieldsets: list[tuple[str | None, dict]] = [(None, {"fields": main})]
        if tracking:
            fieldsets.append(
                (
                    "Tracking",
                    {
                        "fields": tracking,
                        "classes": ["collapse"],
                        "description": "Grouping key and correlation id; usually left empty.",
                    },
                )
            )
        return fieldsets


def _term_as(field: Field, term: str) -> Any:
    """`term` as a value of `field`, or None when no row can hold it (not a UUID for a UUID
    field, not a number for a number field, longer than the column)."""
    try:
        value = field.to_python(term)
    except ValidationError:
        return None
    if isinstance(value, str) and field.max_length and len(value) > field.max_length:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > BIGINT_MAX:
        return None
    return value


def _equal_to(column: str, field: Field, term: str) -> Q | None:
    """`column` (holding values of `field`) equals `term`; for a UUID also "starts with" 8 or
    more hex digits of one, as the range of ids they begin (an index range scan, like the
    pages' id prefix)."""
    value = _term_as(field, term)
    if value is not None:
        return Q(**{column: value})
    digits = term.replace("-", "").lower()
    if isinstance(field, UUIDField) and ID_PREFIX.match(term) and len(digits) < 32:
        low, high = uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))
        return Q(**{f"{column}__range": (low, high)})
    return None


def exact_match(model: type[Model], path: str, term: str) -> Q | None:
    """The condition "`path` equals `term`", in a form an index serves, or None when `term`
    cannot be such a value.

    A plain column is `column = term`. A path through a foreign key (`customer__slug`,
    `agenda_progress__agenda__id`) is resolved first (at most RELATED_KEYS_CAP rows) and
    becomes `customer_id IN (…)`, so that several conditions OR-ed together stay one bitmap
    scan of this table's indexes instead of a join that reads every row.
    """
    name, _, rest = path.partition("__")
    field = model._meta.get_field(name)
    if not rest:
        return _equal_to(field.attname, field, term)
    target = field.target_field
    if rest in ("pk", target.name):  # the foreign key column holds the key: no join
        return _equal_to(field.attname, target, term)
    inner = exact_match(field.related_model, rest, term)
    if inner is None:
        return None
    keys = list(
        field.related_model._default_manager.filter(inner)
        .order_by()
        .values_list(target.attname, flat=True)[:RELATED_KEYS_CAP]
    )
    return Q(**{f"{field.attname}__in": keys}) if keys else None


def exact_search(queryset: QuerySet, paths: list[str] | tuple[str, ...], term: str) -> QuerySet:
    """Rows where any of `paths` equals the whole `term` (no rows when none can)."""
    term = term.strip()
    if not term:
        return queryset
    conditions = [
        condition
        for path in paths
        if (condition := exact_match(queryset.model, path.lstrip("=^@"), term)) is not None
    ]
    if not conditions:
        return queryset.none()
    return queryset.filter(reduce(operator.or_, conditions))


class ExactFilter(admin.SimpleListFilter):
    """A sidebar filter that is a text box, not one link per value: two thousand customers are
    two thousand links (and a query for them) with Django's related-field filter.

    The typed value must equal one of `fields` (paths as in `exact_match`), e.g. the customer's
    slug or id; it is also the URL parameter: `?customer=acme`. Build one with `exact_filter`.
    """

    template = "admin/exact_filter.html"
    fields: tuple[str, ...] = ()
    placeholder = ""
    hidden: tuple[tuple[str, str], ...] = ()

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple]:
        value = self.value()
        return [(value, value)] if value else []

    def has_output(self) -> bool:
        return True

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        return exact_search(queryset, self.fields, value)

    def choices(self, changelist: Any):
        # The text box's form keeps the other filters, the search and the ordering.
        self.hidden = tuple(
            (name, value)
            for name, values in changelist.filter_params.items()
            if name != self.parameter_name
            for value in values
        )
        yield from super().choices(changelist)


def exact_filter(
    parameter: str, *fields: str, title: str = "", placeholder: str = ""
) -> type[ExactFilter]:
    """An `ExactFilter` on `?<parameter>=`, matching any of `fields` (default: the parameter).

    `exact_filter("customer", "customer__slug", "customer__id", placeholder="slug or id")`
    """
    return type(
        f"{parameter.title().replace('_', '')}ExactFilter",
        (ExactFilter,),
        {
            "parameter_name": parameter,
            "fields": fields or (parameter,),
            "title": title or parameter.replace("_", " "),
            "placeholder": placeholder,
        },
    )


CustomerFilter = exact_filter(
    "customer", "customer__slug", "customer__id", placeholder="customer slug or id"
)
InsightFilter = exact_filter(
    "insight", "insight__name", "insight__id", placeholder="insight name or id"
)


class BigTableAdmin(admin.ModelAdmin):
    """The admin of a table that grows with history (agendas, their progress and operations,
    executions, queues, the callback outbox, the audit trail). Its changelist:

    - counts at most 10,000 rows (`CappedCountPaginator`) and never the unfiltered table
      (`show_full_result_count = False`), and computes no facet counts;
    - has no `date_hierarchy` (a `created_at` list filter gives today / 7 days / this month
      from static links instead);
    - searches by equality (`exact_search`): every entry of `search_fields` must be a column
      with an index, or a path through a foreign key to one;
    - filters on customers, insights and templates with a text box (`exact_filter`);
    - sorts only by the columns in `sortable_by`, which subclasses keep to indexed ones.
    """

    paginator = CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    date_hierarchy = None

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return exact_search(queryset, self.get_search_fields(request), search_term), False
