"""API pagination (DESIGN §8): `?limit=&offset=`, default 100, max 1000.

Kept apart from popsite/api.py on purpose: DRF imports DEFAULT_PAGINATION_CLASS while
`rest_framework.generics` is still initialising, so this module must not import anything
that needs generics (viewsets, drf-spectacular's AutoSchema).
"""

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000
