"""Pages of agendas, templates and progress by link id (the README's Web pages): scoped selectors
in, the
services for actions, HTML out. Another customer's object is a 404 here as in the API."""

import json
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from agendas.forms import AgendaFilterForm, ProgressForm, TemplateRunForm, submit_customers
from agendas.models import Agenda, AgendaProgress, AgendaTemplate
from agendas.outputs import agenda_outputs, is_web_link
from agendas.payload_example import payload_example
from agendas.selectors import (
    agenda_list,
    agenda_progress_in_states,
    agenda_search,
    agenda_template_list,
    execution_list,
    progress_summary,
)
from agendas.services import (
    PauseMode,
    RerunMode,
    agenda_abort,
    agenda_pause,
    agenda_rerun,
    agenda_resume,
)
from agendas.states import TERMINAL
from agendas.template_services import agenda_template_preview, agenda_template_run
from agendas.template_versions import (
    MAX_VERSION_NUMBER,
    template_version_get,
    template_version_list,
    version_is_large,
    versions_diff,
)
from agendas.waiting import waiting_reason
from core.pages import (
    duration_text,
    flash_outcome,
    is_partial,
    pretty_json,
    refresh_url,
    visible_or_404,
)
from core.pagination import CappedCountPaginator
from core.svg_geometry import dag_layout
from resourcepools.models import Membership
from resourcepools.selectors import customer_ids_with_role, has_role, principal_is_staff

Role = Membership.Role
State = AgendaProgress.State


AGENDAS_PER_PAGE = 50


PROGRESS_AGENDAS_SHOWN = 500


@login_required
def agendas(request: HttpRequest) -> HttpResponse:
    partial = is_partial(request)
    form = AgendaFilterForm(request.GET or None, principal=request.user, with_choices=not partial)
    filters = form.cleaned_data if form.is_valid() else {}
    rows = agenda_search(
        principal=request.user,
        state=filters.get("state") or "",
        customer_id=filters.get("customer") or None,
        link_id=filters.get("link_id") or "",
        template_id=filters.get("template") or None,
        insight_id=filters.get("insight") or None,
        text=filters.get("text") or "",
        labels=filters.get("label") or (),
    )
    count_from = None
    if filters.get("state") and not any(
        filters.get(name) for name in ("link_id", "template", "insight", "text", "label")
    ):
        # Only states (and a customer): counted on the progress rows, without the join.
        count_from = agenda_progress_in_states(
            principal=request.user,
            states=[filters["state"]],
            customer_id=filters.get("customer") or None,
        )
    paginator = CappedCountPaginator(rows, AGENDAS_PER_PAGE, count_from=count_from)
    page = paginator.get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("partial", None)
    context = {
        "nav": "agendas",
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "filtered": any(filters.values()) if filters else False,
        "searching": bool(filters.get("text")),
        "can_act": principal_is_staff(request.user)
        or bool(customer_ids_with_role(request.user, Role.SUBMITTER)),
        "refresh_url": refresh_url(request),
    }
    template = "pages/agenda_table.html" if partial else "pages/agenda_list.html"
    return render(request, template, context)


def _agenda_actions(request: HttpRequest, agenda: Agenda) -> dict[str, bool]:
    """Which buttons to offer: the submitter role, and the moves docs/design.md §4 allows now."""
    if not has_role(request.user, agenda.customer_id, Role.SUBMITTER):
        return {}
    progress = agenda.progress
    state = progress.state
    executing = state == State.EXECUTING
    return {
        "abort": state not in TERMINAL and not (executing and progress.abort_requested),
        "pause": state in (State.PENDING, State.READY, State.QUEUED)
        or (executing and not progress.pause_requested),
        "pause_now": executing and not progress.pause_now and not progress.abort_requested,
        "resume": state == State.PAUSED or (executing and progress.pause_requested),
        "rerun": state in TERMINAL
        or state == State.PAUSED
        or (state == State.PENDING and progress.do_not_run),
    }


@login_required
def agenda_detail(request: HttpRequest, agenda_id: object) -> HttpResponse:
    agenda = visible_or_404(agenda_list(principal=request.user), agenda_id)
    progress = agenda.progress
    operations = list(progress.operations.all())
    executions = list(
        execution_list(principal=request.user).filter(agenda=agenda).order_by("-number")
    )
    actions = _agenda_actions(request, agenda)
    context = {
        "nav": "agendas",
        "agenda": agenda,
        "progress": progress,
        "operations": [
            {
                "row": operation,
                "anchor": f"op-{index}",
                "result": None if operation.result is None else pretty_json(operation.result),
                "diagnostics": pretty_json(operation.diagnostics) if operation.diagnostics else "",
                "params": pretty_json(operation.params) if operation.params else "",
                "duration": duration_text(
                    (operation.completed_at - operation.started_at).total_seconds()
                )
                if operation.started_at and operation.completed_at
                else "",
            }
            for index, operation in enumerate(operations, start=1)
        ],
        "executions": [
            {"row": execution, "diagnostics": pretty_json(execution.diagnostics)}
            for execution in executions
        ],
        "outputs": [
            {**output, "link": is_web_link(output["url"])} for output in agenda_outputs(operations)
        ],
        "dag": dag_layout(operations, agenda.operations),
        "actions": actions,
        "can_act": bool(actions),
        "is_terminal": progress.state in TERMINAL,
        "rerun_modes": [
            (RerunMode.CONTINUE, "Continue: keep succeeded operations"),
            (RerunMode.RESET_ALL, "Reset all operations"),
            (RerunMode.OPERATIONS_TO_RESET, "Reset the chosen operations (and their dependants)"),
        ],
        "diagnostics": pretty_json(progress.diagnostics) if progress.diagnostics else "",
        "waiting_reason": waiting_reason(progress),
        "request_json": pretty_json({"operations": agenda.operations, "params": agenda.params}),
        "refresh_url": refresh_url(request),
    }
    template = "pages/agenda_live.html" if is_partial(request) else "pages/agenda_detail.html"
    return render(request, template, context)


def _agenda_act(request: HttpRequest, agenda: Agenda, action: str) -> str:
    """Do a page action on the agenda; the message to show."""
    if action == "abort":
        progress = agenda_abort(principal=request.user, agenda=agenda)
        return (
            "Abort requested: the worker stops at its next report."
            if progress.state == State.EXECUTING
            else "Agenda aborted."
        )
    elif action == "pause":
        mode = request.POST.get("mode") or PauseMode.AFTER_RUNNING
        progress = agenda_pause(principal=request.user, agenda=agenda, mode=mode)
        if progress.state != State.EXECUTING:
            return "Agenda paused."
        if progress.pause_now:
            return "Pause requested now: the worker stops its running operations, keeping them."
        return "Pause requested: the worker pauses after its running operations."
    elif action == "resume":
        agenda_resume(principal=request.user, agenda=agenda)
        return "Agenda resumed: it is ready again."
    elif action == "rerun":
        mode = request.POST.get("mode", RerunMode.CONTINUE)
        progress = agenda_rerun(
            principal=request.user,
            agenda=agenda,
            mode=mode,
            operations=request.POST.getlist("operations"),
        )
        return f"Agenda rerun ({mode.replace('_', ' ')}): it is {progress.state} now."
    else:
        raise Http404(f"No agenda action {action!r}.")


@login_required
@require_POST
def agenda_action(request: HttpRequest, agenda_id: object, action: str) -> HttpResponse:
    agenda = visible_or_404(agenda_list(principal=request.user), agenda_id)
    flash_outcome(request, lambda: _agenda_act(request, agenda, action))
    return redirect("pages:agenda-detail", agenda_id=agenda.pk)


@login_required
def templates(request: HttpRequest) -> HttpResponse:
    rows = (
        agenda_template_list(principal=request.user)
        .annotate(shared_with=Count("allowed_customers"))
        .order_by("name", "customer__name")
    )
    return render(request, "pages/template_list.html", {"nav": "templates", "templates": rows})


@login_required
def template_detail(request: HttpRequest, template_id: object) -> HttpResponse:
    template: AgendaTemplate = visible_or_404(
        agenda_template_list(principal=request.user), template_id
    )
    customers = submit_customers(request.user)
    can_run = customers.exists()
    preview = None
    if request.method == "POST":
        form = TemplateRunForm(request.POST, customers=customers)
        wants_run = request.POST.get("action") == "run"
        if form.is_valid():
            data = form.cleaned_data
            try:
                if wants_run:
                    if not can_run:
                        raise ValidationError(
                            {"customer": ["Running a template needs the submitter role."]}
                        )
                    agenda, _ = agenda_template_run(
                        principal=request.user,
                        template=template,
                        payload=data["payload"],
                        customer=data["customer"],
                        cid=getattr(request, "cid", ""),
                        link_id=data["link_id"] or None,
                        external_id=data["external_id"] or None,
                        priority=data["priority"],
                        version=data["version"],
                    )
                    messages.success(request, f"Agenda {agenda.pk} submitted.")
                    return redirect("pages:agenda-detail", agenda_id=agenda.pk)
                expanded = agenda_template_preview(
                    principal=request.user,
                    template=template,
                    payload=data["payload"],
                    version=data["version"],
                )
                preview = {
                    "body": pretty_json(expanded.agenda),
                    "problems": expanded.errors,
                    "version": expanded.version,
                }
            except ValidationError as error:
                form.add_service_errors(error)
    else:
        example = payload_example(template.payload_schema)
        form = TemplateRunForm(
            customers=customers, initial={"payload": json.dumps(example, indent=2)}
        )
    context = {
        "nav": "templates",
        "template": template,
        "form": form,
        "preview": preview,
        "can_run": can_run,
        # Staff always name the customer: the service never guesses one for them.
        "single_customer": not principal_is_staff(request.user) and customers.count() == 1,
        "agenda_json": pretty_json(template.agenda),
        "static_parameters": pretty_json(template.static_parameters or {}),
        "payload_schema": pretty_json(template.payload_schema) if template.payload_schema else "",
        "shared_with": list(template.allowed_customers.values_list("name", flat=True)),
        "recent": agenda_search(principal=request.user, template_id=template.pk)[:10],
        **_template_versions_context(request, template),
    }
    return render(
        request, "pages/template_detail.html", context, status=400 if context["diff_error"] else 200
    )


VERSIONS_SHOWN = 50


def _version_number(text: str | None) -> int | None:
    """A version number from the query string; None when absent or not one."""
    text = (text or "").strip()
    if not text.isdigit() or len(text) > 10 or int(text) > MAX_VERSION_NUMBER:
        return None
    return int(text) or None


def _template_versions_context(request: HttpRequest, template: AgendaTemplate) -> dict:
    """The newest versions and a side-by-side diff of two (`?from=&to=`; by default the
    latest against the one before it)."""
    versions = list(
        template_version_list(template=template).defer(
            "agenda", "static_parameters", "payload_schema"
        )[:VERSIONS_SHOWN]
    )
    asked = "from" in request.GET or "to" in request.GET
    old, new = _version_number(request.GET.get("from")), _version_number(request.GET.get("to"))
    if not asked and len(versions) >= 2:
        old, new = versions[1].number, versions[0].number
    diff, diff_error, diff_offered = None, "", False
    if asked and (old is None or new is None):
        diff_error = "Give two version numbers to compare (from and to)."
    elif old is not None and new is not None:
        try:
            sides = (
                template_version_get(template=template, number=old, field="from"),
                template_version_get(template=template, number=new, field="to"),
            )
            # Unasked, a long template's latest change is offered as a link, not diffed.
            diff_offered = not asked and any(version_is_large(side) for side in sides)
            diff = None if diff_offered else versions_diff(*sides)
        except ValidationError as error:
            diff_error = " ".join(error.messages)
    # A shared template's readers see its history, not the names of the owner's people.
    show_authors = has_role(request.user, template.customer_id, Role.VIEWER)
    return {
        "versions": [
            {
                "row": version,
                "author": version.author.get_username() if show_authors and version.author else "",
            }
            for version in versions
        ],
        "latest_version": versions[0].number if versions else None,
        "diff": diff,
        "diff_from": old,
        "diff_to": new,
        "diff_error": diff_error,
        "diff_offered": diff_offered,
    }


STATE_ORDER = [value for value, _ in State.choices]


@login_required
def progress(request: HttpRequest) -> HttpResponse:
    link_id = request.GET.get("link_id", "").strip()
    status = 200
    if link_id:
        form = ProgressForm(request.GET)
        if not form.is_valid():
            # NUL, or longer than any stored link id: a 400 naming the field, not a query.
            for error in form.errors["link_id"]:
                messages.error(request, f"Link id: {error}")
            link_id, status = "", 400
    summary = (
        progress_summary(principal=request.user, link_id=link_id, limit=PROGRESS_AGENDAS_SHOWN)
        if link_id
        else None
    )
    if summary is not None and not summary["total"]:
        summary, status = None, 404  # none visible: not "complete at 0 %"
    counts = []
    if summary:
        counts = [
            (state, summary["counts"][state])
            for state in STATE_ORDER
            if summary["counts"].get(state)
        ]
    context = {
        "nav": "progress",
        "link_id": link_id,
        "summary": summary,
        "counts": counts,
        "agendas": summary["agendas"] if summary else [],
        "shown": PROGRESS_AGENDAS_SHOWN,
        "agendas_url": f"{reverse('pages:agendas')}?{urlencode({'link_id': link_id})}",
    }
    return render(request, "pages/progress.html", context, status=status)
