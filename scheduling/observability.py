"""Operational endpoints at the site root: GET /metrics, /healthz, /readyz,
/healthz/scheduler (docs/design.md §8)."""

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
from scheduling.recurring import TICKER_FUNC


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


def _database_error() -> str | None:
    """None when the database answers a trivial query, else the error's class name."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as error:
        return f"error: {error.__class__.__name__}"
    return None


def _unavailable(checks: dict[str, str]) -> JsonResponse:
    response = JsonResponse({"status": "unavailable", "checks": checks}, status=503)
    response["Retry-After"] = "5"
    return response


def ticker_window_seconds() -> float:
    """How recently a ticker link must have finished for the scheduler to count as healthy."""
    return 3 * float(getattr(settings, "POP_TICKER_LINK_SECONDS", 10.0))


@require_GET
def readyz_view(request: HttpRequest) -> JsonResponse:
    """Ready: this node can serve, i.e. the database answers.

    The scheduler's health is not part of it (`/healthz/scheduler`): a web node serves the API
    and the pages whether or not a cluster is running, and a readiness probe that included the
    ticker took every web node out of service whenever the scheduler hiccuped.
    """
    error = _database_error()
    if error:
        return _unavailable({"database": error})
    return JsonResponse({"status": "ok", "checks": {"database": "ok"}})


@require_GET
def scheduler_health_view(request: HttpRequest) -> JsonResponse:
    """The scheduler is healthy: a ticker link finished within three links
    (POP_TICKER_LINK_SECONDS each); the ticker runs fill and promote, so a stale ticker means
    queues are no longer being filled. For monitoring and for a cluster's own probe."""
    window = ticker_window_seconds()
    try:
        recent = Success.objects.filter(
            func=TICKER_FUNC, stopped__gte=timezone.now() - timedelta(seconds=window)
        ).exists()
    except DatabaseError as error:
        return _unavailable({"database": f"error: {error.__class__.__name__}"})
    if not recent:
        return _unavailable(
            {"database": "ok", "scheduler": f"no ticker finished in the last {window:g} s"}
        )
    return JsonResponse({"status": "ok", "checks": {"database": "ok", "scheduler": "ok"}})


urlpatterns = [
    path("metrics", metrics_view, name="metrics"),
    path("healthz", healthz_view, name="healthz"),
    path("readyz", readyz_view, name="readyz"),
    path("healthz/scheduler", scheduler_health_view, name="healthz-scheduler"),
]
