"""Operator pages (DESIGN §10): scoped selectors in, the API's services for actions, HTML out.

Views decide what is visible and which buttons are offered; templates only format. Another
customer's object is a 404 here as in the API. Chart geometry (inline SVG) is computed here
so the templates stay free of arithmetic.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from agendas.models import Agenda, AgendaProgress, AgendaTemplate, OperationProgress
from agendas.selectors import (
    agenda_list,
    agenda_template_list,
    execution_list,
    progress_summary,
)
from agendas.services import (
    RerunMode,
    agenda_abort,
    agenda_pause,
    agenda_rerun,
    agenda_resume,
    agenda_template_preview,
    agenda_template_run,
)
from agendas.states import TERMINAL, InvalidTransition
from agendas.validation import operation_dependencies
from popsite.api import unstorable_text_problem
from popsite.dashboard_selectors import (
    THROUGHPUT_MINUTES,
    CustomerShare,
    agenda_search,
    overview_get,
    pools_overview,
)
from popsite.parsers import json_loads_limited
from resourcepools.models import Customer, Membership
from resourcepools.selectors import customer_list, has_role, insight_list, principal_is_staff
from scheduling.api.selectors import schedule_list
from scheduling.models import Schedule
from scheduling.schedule_services import schedule_pause, schedule_resume, schedule_trigger

Role = Membership.Role
State = AgendaProgress.State
AGENDAS_PER_PAGE = 50
SCHEDULE_RUNS_SHOWN = 50
DAG_MAX_OPERATIONS = 300
PROGRESS_AGENDAS_SHOWN = 500


# --- small formatting helpers ----------------------------------------------------------------


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


def _is_partial(request: HttpRequest) -> bool:
    return request.GET.get("partial") == "1"


def _refresh_url(request: HttpRequest) -> str:
    query = request.GET.copy()
    query["partial"] = "1"
    return f"{request.path}?{query.urlencode()}"


def _visible(queryset: QuerySet, pk: object) -> Any:
    """One row of a scoped queryset; missing and foreign rows are both 404 (DESIGN §9)."""
    try:
        return queryset.get(pk=pk)
    except queryset.model.DoesNotExist as error:
        raise Http404(f"No visible {queryset.model._meta.verbose_name} {pk}.") from error


# --- inline SVG geometry -----------------------------------------------------------------------


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


@dataclass(frozen=True)
class DagNode:
    name: str
    label: str
    state: str
    percent: float
    anchor: str
    x: int
    y: int
    bar_width: float


@dataclass(frozen=True)
class DagEdge:
    path: str
    state: str


NODE_WIDTH = 176
NODE_HEIGHT = 52
GAP_X = 56
GAP_Y = 16
PAD = 12
LABEL_CHARS = 20
LANE_GAP = 10


def _crosses_a_node(
    positions: dict[str, tuple[int, int]],
    depth: dict[str, int],
    source: str,
    target: str,
    start_y: float,
    end_y: float,
) -> bool:
    """Whether a direct curve from `source` to `target` would pass behind another node."""
    low, high = min(start_y, end_y) - 4, max(start_y, end_y) + 4
    between = range(depth[source] + 1, depth[target])
    return any(
        depth[name] in between and y < high and y + NODE_HEIGHT > low
        for name, (_, y) in positions.items()
    )


def _ancestors(parents: dict[str, list[str]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}

    def visit(name: str, trail: frozenset[str]) -> set[str]:
        if name in found:
            return found[name]
        result: set[str] = set()
        for parent in parents.get(name, ()):
            if parent not in trail:
                result.add(parent)
                result |= visit(parent, trail | {name})
        found[name] = result
        return result

    for name in parents:
        visit(name, frozenset())
    return found


def dag_layout(rows: list[OperationProgress], operations: Any) -> dict | None:
    """Columns by dependency depth, left to right; edges after transitive reduction."""
    if not rows or len(rows) > DAG_MAX_OPERATIONS:
        return None
    names = [row.name for row in rows]
    known = set(names)
    declared = operation_dependencies(operations) if isinstance(operations, list) else {}
    parents = {
        name: sorted(dep for dep in declared.get(name, ()) if dep in known and dep != name)
        for name in names
    }
    ancestors = _ancestors(parents)
    reduced = {
        name: [
            parent
            for parent in deps
            if not any(parent in ancestors.get(other, ()) for other in deps if other != parent)
        ]
        for name, deps in parents.items()
    }
    depth: dict[str, int] = {}

    def depth_of(name: str, trail: frozenset[str]) -> int:
        # `trail` guards against a cycle (submit rejects them; generated operations might not).
        if name not in depth:
            depth[name] = 1 + max(
                (
                    depth_of(parent, trail | {name})
                    for parent in parents[name]
                    if parent not in trail
                ),
                default=-1,
            )
        return depth[name]

    for name in names:
        depth_of(name, frozenset())
    columns: dict[int, list[OperationProgress]] = {}
    for row in rows:
        columns.setdefault(depth[row.name], []).append(row)
    tallest = max(len(column) for column in columns.values())
    row_step = NODE_HEIGHT + GAP_Y
    positions: dict[str, tuple[int, int]] = {}
    nodes = []
    for index, row in enumerate(rows, start=1):
        column = columns[depth[row.name]]
        slot = column.index(row)
        offset = (tallest - len(column)) * row_step // 2
        x = PAD + depth[row.name] * (NODE_WIDTH + GAP_X)
        y = PAD + offset + slot * row_step
        positions[row.name] = (x, y)
        label = row.name if len(row.name) <= LABEL_CHARS else row.name[: LABEL_CHARS - 1] + "…"
        nodes.append(
            DagNode(
                name=row.name,
                label=label,
                state=row.state,
                percent=round(row.percent_complete, 0),
                anchor=f"op-{index}",
                x=x,
                y=y,
                bar_width=round((NODE_WIDTH - 20) * min(100.0, row.percent_complete) / 100, 1),
            )
        )
    states = {row.name: row.state for row in rows}
    content_bottom = PAD + tallest * row_step - GAP_Y
    edges = []
    lanes = 0
    for name, deps in reduced.items():
        x2, y2 = positions[name]
        for parent in deps:
            x1, y1 = positions[parent]
            start_x, start_y = x1 + NODE_WIDTH, y1 + NODE_HEIGHT // 2
            end_x, end_y = x2 - 4, y2 + NODE_HEIGHT // 2
            if _crosses_a_node(positions, depth, parent, name, start_y, end_y):
                # Skip over the columns in between along a lane under the graph, so the line
                # never runs behind a node it does not belong to.
                lane = content_bottom + LANE_GAP * (lanes + 1)
                lanes += 1
                quarter = GAP_X / 4
                path = (
                    f"M{start_x} {start_y} C{start_x + quarter} {start_y} {start_x + quarter} "
                    f"{lane} {start_x + 2 * quarter} {lane} L{end_x - 2 * quarter} {lane} "
                    f"C{end_x - quarter} {lane} {end_x - quarter} {end_y} {end_x} {end_y}"
                )
            else:
                middle = (start_x + end_x) / 2
                path = f"M{start_x} {start_y} C{middle} {start_y} {middle} {end_y} {end_x} {end_y}"
            edges.append(DagEdge(path=path, state=states[parent]))
    width = PAD * 2 + (max(depth.values()) + 1) * (NODE_WIDTH + GAP_X) - GAP_X
    height = content_bottom + PAD + LANE_GAP * lanes
    return {
        "nodes": nodes,
        "edges": edges,
        "width": width,
        "height": height,
        "node_width": NODE_WIDTH,
        "node_height": NODE_HEIGHT,
    }


# --- overview ----------------------------------------------------------------------------------


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
        "refresh_url": _refresh_url(request),
    }
    template = "pages/overview_live.html" if _is_partial(request) else "pages/overview.html"
    return render(request, template, context)


# --- agendas -----------------------------------------------------------------------------------


class AgendaFilterForm(forms.Form):
    text = forms.CharField(required=False, label="Id or external id", max_length=255, strip=True)
    state = forms.ChoiceField(required=False, label="State")
    customer = forms.ChoiceField(required=False, label="Customer")
    template = forms.ChoiceField(required=False, label="Template")
    insight = forms.ChoiceField(required=False, label="Insight")
    link_id = forms.CharField(required=False, label="Link id", max_length=255, strip=True)

    def __init__(self, *args: Any, principal: Any, with_choices: bool = True, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["state"].choices = [("", "any state"), *State.choices]
        if not with_choices:
            # The 5-second table refresh re-applies the filters without building the selects.
            for name in ("customer", "template", "insight"):
                self.fields[name] = forms.UUIDField(required=False)
            return
        self.fields["customer"].choices = [("", "any customer")] + [
            (str(pk), name)
            for pk, name in customer_list(principal=principal).values_list("pk", "name")
        ]
        self.fields["template"].choices = [("", "any template")] + [
            (str(pk), name)
            for pk, name in agenda_template_list(principal=principal)
            .order_by("name")
            .values_list("pk", "name")
        ]
        self.fields["insight"].choices = [("", "any insight")] + [
            (str(pk), f"{pool} / {name}")
            for pk, name, pool in insight_list(principal=principal).values_list(
                "pk", "name", "resource_pool__name"
            )
        ]


@login_required
def agendas(request: HttpRequest) -> HttpResponse:
    partial = _is_partial(request)
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
    )
    page = Paginator(rows, AGENDAS_PER_PAGE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("partial", None)
    context = {
        "nav": "agendas",
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "filtered": any(filters.values()) if filters else False,
        "refresh_url": _refresh_url(request),
    }
    template = "pages/agenda_table.html" if partial else "pages/agenda_list.html"
    return render(request, template, context)


def _agenda_actions(request: HttpRequest, agenda: Agenda) -> dict[str, bool]:
    """Which buttons to offer: the submitter role, and the moves DESIGN §3 allows now."""
    if not has_role(request.user, agenda.customer_id, Role.SUBMITTER):
        return {}
    progress = agenda.progress
    state = progress.state
    executing = state == State.EXECUTING
    return {
        "abort": state not in TERMINAL and not (executing and progress.abort_requested),
        "pause": state in (State.PENDING, State.READY, State.QUEUED)
        or (executing and not progress.pause_requested),
        "resume": state == State.PAUSED,
        "rerun": state in TERMINAL
        or state == State.PAUSED
        or (state == State.PENDING and progress.do_not_run),
    }


@login_required
def agenda_detail(request: HttpRequest, agenda_id: object) -> HttpResponse:
    agenda = _visible(agenda_list(principal=request.user), agenda_id)
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
        "request_json": pretty_json({"operations": agenda.operations, "params": agenda.params}),
        "refresh_url": _refresh_url(request),
    }
    template = "pages/agenda_live.html" if _is_partial(request) else "pages/agenda_detail.html"
    return render(request, template, context)


@login_required
@require_POST
def agenda_action(request: HttpRequest, agenda_id: object, action: str) -> HttpResponse:
    agenda = _visible(agenda_list(principal=request.user), agenda_id)
    try:
        if action == "abort":
            progress = agenda_abort(principal=request.user, agenda=agenda)
            done = (
                "Abort requested: the worker stops at its next report."
                if progress.state == State.EXECUTING
                else "Agenda aborted."
            )
        elif action == "pause":
            progress = agenda_pause(principal=request.user, agenda=agenda)
            done = (
                "Pause requested: the worker pauses after its running operations."
                if progress.state == State.EXECUTING
                else "Agenda paused."
            )
        elif action == "resume":
            agenda_resume(principal=request.user, agenda=agenda)
            done = "Agenda resumed: it is ready again."
        elif action == "rerun":
            mode = request.POST.get("mode", RerunMode.CONTINUE)
            progress = agenda_rerun(
                principal=request.user,
                agenda=agenda,
                mode=mode,
                operations=request.POST.getlist("operations"),
            )
            done = f"Agenda rerun ({mode.replace('_', ' ')}): it is {progress.state} now."
        else:
            raise Http404(f"No agenda action {action!r}.")
    except InvalidTransition as error:
        messages.error(request, f"Refused (409): {error}")
    except ValidationError as error:
        messages.error(request, "Refused: " + " ".join(error.messages))
    else:
        messages.success(request, done)
    return redirect("pages:agenda-detail", agenda_id=agenda.pk)


# --- templates ---------------------------------------------------------------------------------


@login_required
def templates(request: HttpRequest) -> HttpResponse:
    rows = (
        agenda_template_list(principal=request.user)
        .annotate(shared_with=Count("allowed_customers"))
        .order_by("name", "customer__name")
    )
    return render(request, "pages/template_list.html", {"nav": "templates", "templates": rows})


class TemplateRunForm(forms.Form):
    payload = forms.CharField(
        required=False,
        label="Payload (JSON)",
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "mono"}),
        help_text="Becomes @<pop.payload> in the template.",
    )
    customer = forms.ModelChoiceField(
        queryset=Customer.objects.none(),
        required=False,
        label="Run for customer",
        empty_label="— choose a customer —",
    )
    link_id = forms.CharField(required=False, max_length=255, label="Link id")
    external_id = forms.CharField(required=False, max_length=255, label="External id")
    priority = forms.IntegerField(required=False, min_value=0, max_value=9, label="Priority (0–9)")

    def __init__(self, *args: Any, customers: QuerySet[Customer], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["customer"].queryset = customers

    def clean_payload(self) -> Any:
        text = self.cleaned_data.get("payload", "").strip() or "{}"
        try:
            payload = json_loads_limited(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(
                f"Not valid JSON: {error.msg} (line {error.lineno}, column {error.colno})."
            ) from error
        except ValueError as error:  # nested too deep, NaN or Infinity
            raise forms.ValidationError(f"Not usable JSON: {error}") from error
        problem = unstorable_text_problem(payload)
        if problem:
            raise forms.ValidationError(problem)
        return payload

    def add_service_errors(self, error: ValidationError) -> None:
        """Put the service's `{field.path: [messages]}` next to the matching form field."""
        found = error.message_dict if hasattr(error, "error_dict") else {"": error.messages}
        for key, texts in found.items():
            field = key.split(".", 1)[0]
            for text in texts:
                if field in self.fields:
                    rest = key[len(field) + 1 :]
                    self.add_error(field, f"{rest}: {text}" if rest else text)
                elif key in ("", "__all__", "non_field_errors"):
                    self.add_error(None, text)
                else:
                    self.add_error(None, f"{key}: {text}")


def _submit_customers(principal: Any) -> QuerySet[Customer]:
    customers = customer_list(principal=principal).order_by("name")
    allowed = [
        pk
        for pk in customers.values_list("pk", flat=True)
        if has_role(principal, pk, Role.SUBMITTER)
    ]
    return customers.filter(pk__in=allowed)


@login_required
def template_detail(request: HttpRequest, template_id: object) -> HttpResponse:
    template: AgendaTemplate = _visible(agenda_template_list(principal=request.user), template_id)
    customers = _submit_customers(request.user)
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
                    )
                    messages.success(request, f"Agenda {agenda.pk} submitted.")
                    return redirect("pages:agenda-detail", agenda_id=agenda.pk)
                body, problems = agenda_template_preview(
                    principal=request.user, template=template, payload=data["payload"]
                )
                preview = {"body": pretty_json(body), "problems": problems}
            except ValidationError as error:
                form.add_service_errors(error)
    else:
        form = TemplateRunForm(customers=customers)
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
    }
    return render(request, "pages/template_detail.html", context)


# --- pools & insights ------------------------------------------------------------------------


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
    context = {"nav": "pools", "pools": rows, "now": now, "refresh_url": _refresh_url(request)}
    template = "pages/pools_live.html" if _is_partial(request) else "pages/pools.html"
    return render(request, template, context)


# --- schedules ---------------------------------------------------------------------------------


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
    schedule = _visible(schedule_list(principal=request.user), schedule_id)
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


@login_required
@require_POST
def schedule_action(request: HttpRequest, schedule_id: object, action: str) -> HttpResponse:
    schedule = _visible(schedule_list(principal=request.user), schedule_id)
    try:
        if action == "pause":
            schedule_pause(principal=request.user, schedule=schedule)
            done = f"Schedule {schedule.name} paused."
        elif action == "resume":
            schedule = schedule_resume(principal=request.user, schedule=schedule)
            when = f"{schedule.next_run_at:%Y-%m-%d %H:%M} UTC" if schedule.next_run_at else "—"
            done = f"Schedule {schedule.name} resumed; next run {when}."
        elif action == "trigger":
            agenda = schedule_trigger(
                principal=request.user, schedule=schedule, cid=getattr(request, "cid", "")
            )
            done = f"Schedule {schedule.name} ran now: agenda {agenda.pk}."
        else:
            raise Http404(f"No schedule action {action!r}.")
    except InvalidTransition as error:
        messages.error(request, f"Refused (409): {error}")
    except ValidationError as error:
        messages.error(request, "Refused: " + " ".join(error.messages))
    else:
        messages.success(request, done)
    target = request.POST.get("next", "")
    if target == "list":
        return redirect("pages:schedules")
    return redirect("pages:schedule-detail", schedule_id=schedule.pk)


# --- progress by link_id -------------------------------------------------------------------


STATE_ORDER = [value for value, _ in State.choices]


class ProgressForm(forms.Form):
    link_id = forms.CharField(label="Link id", max_length=255, strip=True)


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
    summary = progress_summary(principal=request.user, link_id=link_id) if link_id else None
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
        "agendas": summary["agendas"][:PROGRESS_AGENDAS_SHOWN] if summary else [],
        "shown": PROGRESS_AGENDAS_SHOWN,
        "agendas_url": f"{reverse('pages:agendas')}?{urlencode({'link_id': link_id})}",
    }
    return render(request, "pages/progress.html", context, status=status)
