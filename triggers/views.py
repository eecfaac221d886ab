"""The triggers pages (docs/design.md §5.4): a customer's triggers with their latest firing,
and one trigger's recent firings with status, reason and agenda. Read-only: triggers are
written through the API, the CLI or the admin."""

from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.pages import pretty_json, visible_or_404
from triggers.models import TriggerFiring
from triggers.selectors import trigger_firings_of, trigger_list

TRIGGERS_SHOWN = 200
FIRINGS_SHOWN = 50


@login_required
def triggers(request: HttpRequest) -> HttpResponse:
    # The latest firing of each trigger: one index probe each (trigger_firing_newest).
    latest = TriggerFiring.objects.filter(trigger=OuterRef("pk")).order_by("-received_at", "-id")
    rows = (
        trigger_list(principal=request.user)
        .annotate(
            last_status=Subquery(latest.values("status")[:1]),
            last_received_at=Subquery(latest.values("received_at")[:1]),
        )
        .order_by("customer__name", "name")[:TRIGGERS_SHOWN]
    )
    context = {"nav": "triggers", "triggers": rows, "shown": TRIGGERS_SHOWN}
    return render(request, "triggers/trigger_list.html", context)


@login_required
def trigger_detail(request: HttpRequest, trigger_id: object) -> HttpResponse:
    trigger = visible_or_404(trigger_list(principal=request.user), trigger_id)
    firings = trigger_firings_of(principal=request.user, trigger=trigger)
    context = {
        "nav": "triggers",
        "trigger": trigger,
        "mapping": pretty_json(trigger.payload_mapping),
        "filter": pretty_json(trigger.filter),
        "labels": pretty_json(trigger.labels),
        "firings": list(firings[:FIRINGS_SHOWN]),
        "firings_shown": FIRINGS_SHOWN,
    }
    return render(request, "triggers/trigger_detail.html", context)
