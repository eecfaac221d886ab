"""Correlation id: taken from `X-POP-CID` or generated, available as `request.cid`."""

import re
import uuid
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

CID_HEADER = "X-POP-CID"
_VALID_CID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class CorrelationIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(CID_HEADER, "")
        request.cid = given if _VALID_CID.match(given) else uuid.uuid4().hex
        response = self.get_response(request)
        response[CID_HEADER] = request.cid
        return response
