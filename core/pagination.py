"""API pagination (docs/design.md §10): `?limit=&offset=`, default 100, max 1000.

Kept apart from core/api.py on purpose: DRF imports DEFAULT_PAGINATION_CLASS while
`rest_framework.generics` is still initialising, so this module must not import anything
that needs generics (viewsets, drf-spectacular's AutoSchema).
"""

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000
    #: PostgreSQL's OFFSET is a bigint; a larger `?offset=` would be a database error (500).
    max_offset = 2**62

    def get_offset(self, request: Request) -> int:
        return min(super().get_offset(request), self.max_offset)
