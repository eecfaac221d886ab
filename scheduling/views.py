"""Pages of pools (queues, workers seen) and cron schedules (the README's Web pages)."""

from datetime import datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from agendas.selectors import agenda_search
from core.pages import (
    duration_text,
    flash_outcome,
    is_partial,
    pretty_json,
    refresh_url,
    visible_or_404,
)
from resourcepools.models import Membership
from resourcepools.selectors import has_role
from scheduling.models import Schedule
from scheduling.schedule_services import schedule_pause, schedule_resume, schedule_trigger
from scheduling.selectors import pools_overview, schedule_list

Role = Membership.Role


SCHEDULE_RUNS_SHOWN = 50


@login_required
def pools(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    details = pools_overview(principal=request.user, now=now)
    rows = [
        {
            "pool": detail.pool,
            "insights": [
                {
                    "detail": insight,
                    "oldest_ready": duration_text(insight.queue.oldest_ready_age_seconds),
                    "mappers": pretty_json(insight.insight.mappers or {}),
                    "workers": [
                        {
                            "worker": worker,
                            "ago": duration_text((now - worker.last_seen_at).total_seconds()),
                        }
                        for worker in insight.workers
                    ],
                }
                for insight in detail.insights
            ],
        }
        for detail in details
    ]
    context = {"nav": "pools", "pools": rows, "now": now, "refresh_url": refresh_url(request)}
    template = "pages/pools_live.html" if is_partial(request) else "pages/pools.html"
    return render(request, template, context)


def _schedule_actions(principal: Any, schedule: Schedule) -> dict[str, bool]:
    manage = has_role(principal, schedule.customer_id, Role.ADMIN)
    return {
        "pause": manage and schedule.state == Schedule.State.ACTIVE,
        "resume": manage and schedule.state == Schedule.State.PAUSED,
        "trigger": has_role(principal, schedule.customer_id, Role.SUBMITTER)
        and schedule.state != Schedule.State.EXPIRED,
    }


def _until(moment: datetime | None) -> str:
    if moment is None:
        return ""
    seconds = (moment - timezone.now()).total_seconds()
    return f"in {duration_text(seconds)}" if seconds >= 0 else f"{duration_text(-seconds)} late"


@login_required
def schedules(request: HttpRequest) -> HttpResponse:
    rows = list(
        schedule_list(principal=request.user)
        .annotate(run_count=Count("agendas"))
        .order_by("customer__name", "name")
    )
    return render(
        request,
        "pages/schedule_list.html",
        {
            "nav": "schedules",
            "schedules": [
                {
                    "row": row,
                    "actions": _schedule_actions(request.user, row),
                    "next_in": _until(row.next_run_at),
                }
                for row in rows
            ],
        },
    )


@login_required
def schedule_detail(request: HttpRequest, schedule_id: object) -> HttpResponse:
    schedule = visible_or_404(schedule_list(principal=request.user), schedule_id)
    runs = agenda_search(principal=request.user).filter(schedule=schedule)
    context = {
        "nav": "schedules",
        "schedule": schedule,
        "actions": _schedule_actions(request.user, schedule),
        "next_in": _until(schedule.next_run_at),
        "payload": pretty_json(schedule.payload),
        "runs": runs[:SCHEDULE_RUNS_SHOWN],
        "run_count": runs.count(),
        "runs_shown": SCHEDULE_RUNS_SHOWN,
    }
    return render(request, "pages/schedule_detail.html", context)


def _schedule_act(request: HttpRequest, schedule: Schedule, action: str) -> str:
    """Do a page action on the schedule; the message to show."""
    if action == "pause":
        schedule_pause(principal=request.user, schedule=schedule)
        return f"Schedule {schedule.name} paused."
    elif action == "resume":
        schedule = schedule_resume(principal=request.user, schedule=schedule)
        when = f"{schedule.next_run_at:%Y-%m-%d %H:%M} UTC" if schedule.next_run_at else "—"
        return f"Schedule {schedule.name} resumed; next run {when}."
    elif action == "trigger":
        agenda = schedule_trigger(
            principal=request.user, schedule=schedule, cid=getattr(request, "cid", "")
        )
        return f"Schedule {schedule.name} ran now: agenda {agenda.pk}."
    else:
        raise Http404(f"No schedule action {action!r}.")


@login_required
@require_POST
def schedule_action(request: HttpRequest, schedule_id: object, action: str) -> HttpResponse:
    schedule = visible_or_404(schedule_list(principal=request.user), schedule_id)
    flash_outcome(request, lambda: _schedule_act(request, schedule, action))
    if request.POST.get("next", "") == "list":
        return redirect("pages:schedules")
    return redirect("pages:schedule-detail", schedule_id=schedule.pk)
