"""API pagination (docs/design.md §10.4): `?limit=&offset=` for the first pages (default 100,
max 1000, offsets up to `MAX_OFFSET`), and keyset pages for everything deeper: `?cursor=`
(empty to start) then follow `next`.

An offset page costs what it skips: PostgreSQL reads and throws away `offset` rows, so a deep
offset on a year of history takes seconds. A cursor page reads from where the last one ended,
by the list's ordering index, whatever its depth; it also never shows a row twice or skips one
while rows are added in front. Offset pages still answer `count`; cursor pages do not (a count
of a long history is itself a scan).

Kept apart from core/api.py on purpose: DRF imports DEFAULT_PAGINATION_CLASS while
`rest_framework.generics` is still initialising, so this module must not import anything
that needs generics (viewsets, drf-spectacular's AutoSchema).
"""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.paginator import Paginator
from django.db import DataError
from django.utils.functional import cached_property
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import CursorPagination, LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response

MAX_OFFSET = 10_000
BAD_CURSOR = "Not a cursor this API gave out."


class _KeysetPages(CursorPagination):
    """DRF's cursor pagination, sized by `limit`, ordered as the list is (its `ordering`)."""

    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000
    ordering = "-created_at"

    def get_ordering(self, request: Request, queryset: Any, view: Any) -> tuple[str, ...]:
        ordering = super().get_ordering(request, queryset, view)
        if "__" in ordering[0]:
            raise ValidationError(
                {"cursor": ["This list is ordered by a related field: page it with offset."]}
            )
        return ordering


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000
    cursor_query_param = "cursor"

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        self._keyset = None
        self._view = view
        if self.cursor_query_param in request.query_params:
            self._keyset = _KeysetPages()
            try:
                return self._keyset.paginate_queryset(queryset, request, view)
            except NotFound as error:  # DRF's answer to a cursor it cannot decode
                raise ValidationError({"cursor": [BAD_CURSOR]}) from error
            except (DjangoValidationError, ValueError, TypeError, DataError) as error:
                # Decodable, but its position is not a value of the ordering's field.
                raise ValidationError({"cursor": [BAD_CURSOR]}) from error
        return super().paginate_queryset(queryset, request, view)

    def get_count(self, queryset: Any) -> int:
        """At most MAX_OFFSET + 1: exact up to the deepest offset page, "more" beyond (a count
        of a long filtered history reads every matching row; nothing can page past it). A view
        may count other rows that match one for one (its `count_queryset`)."""
        count_queryset = getattr(getattr(self, "_view", None), "count_queryset", None)
        if count_queryset is not None:
            queryset = count_queryset(queryset)
        try:
            return queryset.order_by()[: MAX_OFFSET + 1].count()
        except (AttributeError, TypeError):
            return min(len(queryset), MAX_OFFSET + 1)

    def get_offset(self, request: Request) -> int:
        offset = super().get_offset(request)
        if offset > MAX_OFFSET:
            raise ValidationError(
                {
                    "offset": [
                        f"Offsets above {MAX_OFFSET} are not served: page deep with ?cursor= "
                        "(empty to start) and follow `next`."
                    ]
                }
            )
        return offset

    def get_next_link(self) -> str | None:
        link = super().get_next_link()
        if link is None or self.offset + self.limit <= MAX_OFFSET:
            return link
        return None  # past the cap: the client goes on with a cursor

    def get_paginated_response(self, data: Any) -> Response:
        if self._keyset is not None:
            return self._keyset.get_paginated_response(data)
        return super().get_paginated_response(data)

    def get_paginated_response_schema(self, schema: dict) -> dict:
        answer = super().get_paginated_response_schema(schema)
        answer["required"] = ["results"]  # a cursor page has no count
        return answer

    def get_schema_operation_parameters(self, view: Any) -> list[dict]:
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Keyset paging: give it empty to start, then follow `next` "
                "(no `count`). Reads by index at any depth; offsets stop at "
                f"{MAX_OFFSET}.",
                "schema": {"type": "string"},
            },
        ]


class CappedCountPaginator(Paginator):
    """Counts at most `cap` rows: `SELECT count(*) FROM (SELECT … LIMIT cap + 1)`.

    Exact below the cap, so "one page" and "show all" decisions stay right; above it `count`
    is the cap and `capped` is true (the admin's templates and the `/agendas/` page then say
    "more than 10000"; pages past the cap are not offered: filter or search instead). Reading
    10,001 rows costs milliseconds where counting a year of history cost seconds. The API's
    offset pages count the same way (`Pagination.get_count`).
    """

    cap = MAX_OFFSET
    capped = False

    def __init__(
        self, object_list: Any, per_page: int, *args: Any, count_from: Any = None, **kwargs: Any
    ):
        """`count_from`: rows that match `object_list` one for one and are cheaper to count
        (the admin passes Paginator's own arguments by position)."""
        super().__init__(object_list, per_page, *args, **kwargs)
        self.count_from = object_list if count_from is None else count_from

    @cached_property
    def count(self) -> int:
        counted = self.count_from.order_by()[: self.cap + 1].count()
        self.capped = counted > self.cap
        return min(counted, self.cap)
