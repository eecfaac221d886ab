"""Operational endpoints at the site root: GET /metrics, /healthz, /readyz (docs/design.md §8)."""

import hmac
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_q.models import Success
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduling.metrics import registry
from scheduling.schedules import TICKER_FUNC


def _metrics_allowed(request: HttpRequest) -> bool:
    """With POP_METRICS_TOKEN set, only `Authorization: Bearer <token>`; without it, only in
    DEBUG or with the explicit POP_METRICS_PUBLIC=true opt-in (closed by default)."""
    token = getattr(settings, "POP_METRICS_TOKEN", "")
    if token:
        given = request.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())
    return bool(settings.DEBUG or getattr(settings, "POP_METRICS_PUBLIC", False))


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for the bearer of POP_METRICS_TOKEN (see `_metrics_allowed`)."""
    if not _metrics_allowed(request):
        response = HttpResponse(
            "metrics token required (set POP_METRICS_TOKEN and send it as a Bearer token)\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)


@require_GET
def healthz_view(request: HttpRequest) -> JsonResponse:
    """The process is up and serving requests."""
    return JsonResponse({"status": "ok"})


@require_GET
def readyz_view(request: HttpRequest) -> JsonResponse:
    """Ready: the database answers and the scheduler's ticker finished a link recently.

    "Recently" is three ticker links (POP_TICKER_LINK_SECONDS each): the ticker runs fill and
    promote, so a stale ticker means queues are no longer being filled.
    """
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        checks["database"] = "ok"
    except DatabaseError as error:
        checks["database"] = f"error: {error.__class__.__name__}"
        return JsonResponse({"status": "unavailable", "checks": checks}, status=503)
    window = 3 * float(getattr(settings, "POP_TICKER_LINK_SECONDS", 10.0))
    recent = Success.objects.filter(
        func=TICKER_FUNC, stopped__gte=timezone.now() - timedelta(seconds=window)
    ).exists()
    checks["scheduler"] = "ok" if recent else f"no ticker finished in the last {window:g} s"
    ready = recent
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )


urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
    path("healthz", healthz_view, name="healthz"),
    path("readyz", readyz_view, name="readyz"),
]
