"""What an unhandled error answers (`handler500`): never a stack trace, never an HTML page on
the API, and a database that cannot be reached is a 503 with `Retry-After`, not a 500.

Django calls the handler while the exception is being handled, so `sys.exc_info()` names it.
A database that refuses connections ("too many clients", a restart, a failover) raises
`OperationalError`/`InterfaceError`; the request did nothing that needs undoing (its
transaction, if any, is gone), so the client may retry.
"""

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import server_error as default_server_error

RETRY_AFTER_SECONDS = 5
UNAVAILABLE = "The database is unavailable right now; nothing was changed. Retry shortly."


def _wants_json(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get(
        "Accept", ""
    )


def server_error(request: HttpRequest) -> HttpResponse:
    error = sys.exc_info()[1]
    if isinstance(error, OperationalError | InterfaceError):
        if _wants_json(request):
            response = JsonResponse({"detail": UNAVAILABLE}, status=503)
        else:
            response = HttpResponse(
                "<!doctype html><title>POP is unavailable</title>"
                f"<h1>Service unavailable</h1><p>{UNAVAILABLE}</p>",
                status=503,
            )
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if _wants_json(request):
        cid = getattr(request, "cid", "")
        detail = "Internal server error."
        if cid:
            detail += f" Correlation id {cid} finds it in the server's logs."
        return JsonResponse({"detail": detail}, status=500)
    return default_server_error(request)
