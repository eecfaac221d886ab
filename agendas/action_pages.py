"""Pages of actions on a set of agendas: from `/agendas/` (ticked rows, or "every agenda
matching" the page's filters) to a confirmation that states the count, then the job's page,
which follows it to done. The work is `agendas.bulk_actions`, as for the API."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from agendas.action_models import AgendaActionJob
from agendas.bulk_actions import (
    agenda_action_preview,
    agenda_action_selection,
    agenda_action_start,
)
from agendas.forms import AgendaFilterForm
from agendas.selectors import agenda_action_job_list
from core.errors import validation_messages
from core.pages import is_partial, refresh_url, visible_or_404

Action = AgendaActionJob.Action
VERBS = {
    Action.ABORT: "Abort",
    Action.PAUSE: "Pause",
    Action.RESUME: "Resume",
    Action.RERUN: "Rerun",
}


def page_filter_selection(request: HttpRequest, query: str) -> dict:
    """The job filter of the `/agendas/` filters in `query` (the page's own address query). The
    free-text search has no job filter: with it, only ticked rows can be acted on."""
    form = AgendaFilterForm(QueryDict(query), principal=request.user, with_choices=False)
    if not form.is_valid():
        raise ValidationError({"filter": ["The page's filters are not valid; filter again."]})
    data = form.cleaned_data
    if data.get("text"):
        raise ValidationError(
            {"filter": ["Clear the search box to act on every match, or tick the rows."]}
        )
    selection = {
        "state": [data["state"]] if data.get("state") else None,
        "customer": str(data["customer"]) if data.get("customer") else None,
        "template": str(data["template"]) if data.get("template") else None,
        "insight": str(data["insight"]) if data.get("insight") else None,
        "link_id": data.get("link_id") or None,
        "label": [f"{key}:{value}" for key, value in data.get("label") or ()] or None,
    }
    return {key: value for key, value in selection.items() if value is not None}


def _asked(request: HttpRequest) -> tuple[str, dict, str]:
    """(action, selection, mode) from the form on `/agendas/` or the confirmation page."""
    action = request.POST.get("action", "")
    if action not in Action.values:
        raise ValidationError({"action": ["Choose an action."]})
    if request.POST.get("scope") == "matching":
        selection = agenda_action_selection(
            filter=page_filter_selection(request, request.POST.get("query", ""))
        )
    else:
        ids = request.POST.getlist("ids")
        if not ids:
            raise ValidationError({"ids": ["Tick at least one agenda, or every match."]})
        selection = agenda_action_selection(ids=ids)
    mode = request.POST.get("mode", "") if action == Action.RERUN else ""
    return action, selection, mode


@login_required
@require_POST
def agendas_act(request: HttpRequest) -> HttpResponse:
    """First post: the confirmation, stating the count. Confirmed: start the job, show it."""
    back = f"/agendas/?{request.POST.get('query', '')}"
    try:
        action, selection, mode = _asked(request)
        if request.POST.get("confirmed") != "yes":
            preview = agenda_action_preview(
                principal=request.user, action=action, selection=selection, mode=mode
            )
            context = {
                "nav": "agendas",
                "verb": VERBS[action],
                "action": action,
                "mode": mode,
                "preview": preview,
                "scope": request.POST.get("scope", "selected"),
                "ids": selection.get("ids", []),
                "filter": selection.get("filter", {}),
                "query": request.POST.get("query", ""),
                "back": back,
            }
            return render(request, "pages/agenda_action_confirm.html", context)
        job = agenda_action_start(
            principal=request.user, action=action, selection=selection, mode=mode
        )
    except ValidationError as error:
        for field_messages in validation_messages(error).values():
            for message in field_messages:
                messages.error(request, message)
        return redirect(back)
    except PermissionDenied as error:
        messages.error(request, str(error))
        return redirect(back)
    return redirect("pages:agenda-action-job", job_id=job.pk)


@login_required
def agenda_action_job(request: HttpRequest, job_id: object) -> HttpResponse:
    job = visible_or_404(agenda_action_job_list(principal=request.user), job_id)
    context = {
        "nav": "agendas",
        "job": job,
        "verb": VERBS[job.action],
        "percent": 100 if not job.matched else min(100, round(100 * job.processed / job.matched)),
        "skipped": sorted(job.skipped.items()),
        "done": job.status != AgendaActionJob.Status.RUNNING,
        "refresh_url": refresh_url(request),
    }
    template = (
        "pages/agenda_action_job_live.html"
        if is_partial(request)
        else "pages/agenda_action_job.html"
    )
    return render(request, template, context)
