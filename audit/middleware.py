"""Binds each request to audit.context, so audit records know who, how and from where."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from audit.context import request_bound


class AuditRequestMiddleware:
    """Place after AuthenticationMiddleware; DRF fills in `user` on the same request later."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with request_bound(request):
            return self.get_response(request)
