"""The overview page (the README's Web pages) and its inline SVG charts; the other pages live in
the app
whose data they show (agendas, scheduling, audit)."""

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.pages import duration_text, is_partial, refresh_url
from popsite.dashboard_selectors import (
    THROUGHPUT_MINUTES,
    CustomerShare,
    overview_get,
)


@dataclass(frozen=True)
class ShareBar:
    label: str
    executing: int
    percent: float
    y: int
    width: float
    is_other: bool


SHARE_ROW = 24


SHARE_LABEL = 96


SHARE_BAR_MAX = 190


def share_chart(shares: list[CustomerShare]) -> dict:
    """Horizontal bars, one per customer, scaled to the largest share."""
    total = sum(share.executing for share in shares)
    largest = max((share.executing for share in shares), default=0)
    bars = [
        ShareBar(
            label=share.label or "other customers",
            executing=share.executing,
            percent=100.0 * share.executing / total if total else 0.0,
            y=index * SHARE_ROW,
            width=max(2.0, SHARE_BAR_MAX * share.executing / largest) if largest else 0.0,
            is_other=not share.label,
        )
        for index, share in enumerate(shares)
    ]
    return {
        "bars": bars,
        "total": total,
        "height": max(SHARE_ROW, len(bars) * SHARE_ROW),
        "width": SHARE_LABEL + 8 + SHARE_BAR_MAX + 62,
        "label_width": SHARE_LABEL,
        "bar_x": SHARE_LABEL + 8,
        "bar_max": SHARE_BAR_MAX,
        "text_x": SHARE_LABEL + 8 + SHARE_BAR_MAX + 6,
    }


SPARK_WIDTH = 360


SPARK_HEIGHT = 64


def sparkline(values: list[int]) -> dict:
    """Polyline points (and a closed area) for per-minute counts, oldest on the left."""
    peak = max(values, default=0)
    count = len(values)
    step = SPARK_WIDTH / (count - 1) if count > 1 else 0
    usable = SPARK_HEIGHT - 8

    def y_of(value: int) -> float:
        return round(SPARK_HEIGHT - 4 - (usable * value / peak if peak else 0), 1)

    points = [(round(index * step, 1), y_of(value)) for index, value in enumerate(values)]
    line = " ".join(f"{x},{y}" for x, y in points)
    area = f"0,{SPARK_HEIGHT} {line} {SPARK_WIDTH},{SPARK_HEIGHT}" if points else ""
    last = points[-1] if points else (0, SPARK_HEIGHT)
    return {
        "width": SPARK_WIDTH,
        "height": SPARK_HEIGHT,
        "line": line,
        "area": area,
        "peak": peak,
        "total": sum(values),
        "last_value": values[-1] if values else 0,
        "last_x": last[0],
        "last_y": last[1],
        "minutes": count,
    }


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
