"""What every server-rendered page shares: formatting, partial refreshes, the 404 of a row
that is missing or not visible (docs/design.md §10.3)."""

import json
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpRequest

from core.errors import InvalidTransition


def duration_text(seconds: float | None) -> str:
    """`95` → "1 min 35 s"; None → "—"."""
    if seconds is None:
        return "—"
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False, ensure_ascii=False, default=str)


def is_partial(request: HttpRequest) -> bool:
    return request.GET.get("partial") == "1"


def refresh_url(request: HttpRequest) -> str:
    query = request.GET.copy()
    query["partial"] = "1"
    return f"{request.path}?{query.urlencode()}"


def visible_or_404(queryset: QuerySet, pk: object) -> Any:
    """One row of a scoped queryset; missing and foreign rows are both 404 (docs/design.md
    §10.3)."""
    try:
        return queryset.get(pk=pk)
    except queryset.model.DoesNotExist as error:
        raise Http404(f"No visible {queryset.model._meta.verbose_name} {pk}.") from error


def flash_outcome(request: HttpRequest, act: Callable[[], str]) -> bool:
    """Run a page's action: flash the message it returns, or why it was refused (the state does
    not allow it: 409 and its reason; invalid input: the messages). True when it was done."""
    try:
        done = act()
    except InvalidTransition as error:
        messages.error(request, f"Refused (409): {error}")
        return False
    except ValidationError as error:
        messages.error(request, "Refused: " + " ".join(error.messages))
        return False
    messages.success(request, done)
    return True
