"""The answer to a login attempt django-axes refuses (AXES_LOCKOUT_CALLABLE).

The API (`POST /api/v1/auth/token/`) gets JSON like the other API errors; the login forms
(`/accounts/login/`, `/admin/login/`) get a page. Both are 429 with Retry-After.
"""

import math
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any = None
) -> HttpResponse:
    minutes = float(getattr(settings, "POP_LOGIN_COOLOFF_MINUTES", 15.0))
    retry_after = str(max(1, math.ceil(minutes * 60)))
    message = (
        "Too many failed logins for this account or address: "
        f"try again in {minutes:g} minute{'s' if minutes != 1 else ''}."
    )
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": message}, status=429)
    else:
        response = render(request, "registration/locked_out.html", {"message": message}, status=429)
    response["Retry-After"] = retry_after
    return response
