"""The overview page (the README's Web pages); its charts' geometry is core/svg_geometry.py, and
the other pages live in the app whose data they show (agendas, scheduling, audit)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.pages import duration_text, is_partial, refresh_url
from core.svg_geometry import share_chart, sparkline
from popsite.dashboard_selectors import (
    THROUGHPUT_MINUTES,
    overview_get,
)


@login_required
def overview(request: HttpRequest) -> HttpResponse:
    data = overview_get(principal=request.user)
    rows = [
        {
            "item": item,
            "queue_fill": min(100.0, 100.0 * item.queued / item.insight.queue_size),
            "oldest_waiting": duration_text(item.oldest_waiting_seconds),
        }
        for item in data.insights
    ]
    context = {
        "nav": "overview",
        "overview": data,
        "rows": rows,
        "totals": {
            "queued": sum(item.queued for item in data.insights),
            "ready": sum(item.ready for item in data.insights),
            "executing": sum(item.executing for item in data.insights),
            "succeeded": sum(item.succeeded_last_hour for item in data.insights),
            "failed": sum(item.failed_last_hour for item in data.insights),
        },
        "shares": share_chart(data.shares),
        "spark": sparkline(data.throughput),
        "throughput_minutes": THROUGHPUT_MINUTES,
        "refresh_url": refresh_url(request),
    }
    template = "pages/overview_live.html" if is_partial(request) else "pages/overview.html"
    return render(request, template, context)
