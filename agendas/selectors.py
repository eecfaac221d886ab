"""Customer-scoped reads of agendas, templates and progress (docs/design.md §9, §10.3)."""

import re
import uuid
from collections.abc import Iterable

from django.db.models import Count, Prefetch, Q, QuerySet, Sum

from agendas.labels import labels_matching
from agendas.models import (
    Agenda,
    AgendaActionJob,
    AgendaProgress,
    AgendaTemplate,
    Execution,
    OperationProgress,
)
from agendas.states import TERMINAL, S
from resourcepools.models import Membership
from resourcepools.selectors import (
    Principal,
    customer_ids_with_role,
    principal_is_staff,
)


def agendas_in_states(
    agendas: QuerySet[Agenda], states: Iterable[str], *, principal: Principal
) -> QuerySet[Agenda]:
    """The principal's `agendas` whose progress is in one of `states`. A customer's user gets
    the scope repeated on the progress side (its rows name the agenda's customer), so
    PostgreSQL reads it by the (customer, state) index instead of every agenda in that state:
    the big customer's capped count of failed agendas at a million agendas 201 → ~125 ms
    (bench `history`). Staff get no such condition (a join condition between the two
    customer columns made the planner misjudge the first page: 41 → 820 ms)."""
    if principal_is_staff(principal):
        return agendas.filter(progress__state__in=list(states))
    return agendas.filter(
        progress__state__in=list(states),
        progress__customer_id__in=customer_ids_with_role(principal),
    )


def agenda_progress_in_states(
    *, principal: Principal, states: Iterable[str], customer_id: object = None
) -> QuerySet[AgendaProgress]:
    """The progress rows (one per agenda) of the principal's agendas in `states`, of one
    customer when given: what a list filtered by nothing else counts, read by the (customer,
    state) or state index without the agendas join (a big customer's failed agendas at a
    million agendas: 200+ ms through the join, a few ms here)."""
    rows = _scoped(AgendaProgress.objects.all(), principal).filter(state__in=list(states))
    return rows.filter(customer_id=customer_id) if customer_id else rows


def _scoped(queryset: QuerySet, principal: Principal, field: str = "customer_id") -> QuerySet:
    if principal_is_staff(principal):
        return queryset
    return queryset.filter(**{f"{field}__in": customer_ids_with_role(principal)})


def agenda_list(*, principal: Principal) -> QuerySet[Agenda]:
    """Agendas of the principal's customers, with progress and operations loaded."""
    agendas = Agenda.objects.select_related(
        "progress", "customer", "insight", "template"
    ).prefetch_related(
        Prefetch("progress__operations", queryset=OperationProgress.objects.order_by("position"))
    )
    return _scoped(agendas, principal)


def agenda_get(*, principal: Principal, agenda_id: object) -> Agenda:
    """One visible agenda; raises Agenda.DoesNotExist for a missing or foreign id."""
    return agenda_list(principal=principal).get(pk=agenda_id)


def agenda_progress_list(*, principal: Principal) -> QuerySet[AgendaProgress]:
    """Agenda progress rows of the principal's customers."""
    progress = AgendaProgress.objects.select_related("agenda", "customer").prefetch_related(
        Prefetch("operations", queryset=OperationProgress.objects.order_by("position"))
    )
    return _scoped(progress, principal)


def operation_progress_list(*, principal: Principal) -> QuerySet[OperationProgress]:
    """Operation progress rows of the principal's customers."""
    operations = OperationProgress.objects.select_related("agenda_progress")
    return _scoped(operations, principal)


def execution_list(*, principal: Principal) -> QuerySet[Execution]:
    """Executions (attempts) of the principal's customers' agendas."""
    return _scoped(Execution.objects.select_related("insight"), principal)


def agenda_template_list(*, principal: Principal) -> QuerySet[AgendaTemplate]:
    """Templates the principal may read: its customers' own, global ones, and shared ones."""
    templates = AgendaTemplate.objects.select_related("customer")
    if principal_is_staff(principal):
        return templates
    customer_ids = customer_ids_with_role(principal, Membership.Role.VIEWER)
    visible = AgendaTemplate.objects.filter(
        Q(customer_id__in=customer_ids) | Q(is_global=True) | Q(allowed_customers__in=customer_ids)
    ).values("pk")
    return templates.filter(pk__in=visible)


PROGRESS_SUMMARY_AGENDAS = 100


def progress_summary(
    *, principal: Principal, link_id: str, limit: int = PROGRESS_SUMMARY_AGENDAS, offset: int = 0
) -> dict:
    """docs/design.md §9: the combined state of every visible agenda sharing `link_id`, from
    one aggregate (counts and percent by state), and a page of its agendas (`limit` from
    `offset`, oldest first) — the answer's size does not grow with the group."""
    visible = _scoped(AgendaProgress.objects.filter(link_id=link_id), principal)
    by_state = {
        row["state"]: row
        for row in visible.order_by()
        .values("state")
        .annotate(n=Count("pk"), percent=Sum("percent_complete"))
    }
    counts = {state: row["n"] for state, row in by_state.items()}
    total = sum(counts.values())
    finished = sum(counts.get(state, 0) for state in TERMINAL)
    if not total:
        summary_state, percent = "complete", 0.0
    elif counts.get(S.FAILED):
        summary_state, percent = "complete", 100.0
    else:
        percent = min(100.0, sum(row["percent"] or 0.0 for row in by_state.values()) / total)
        if counts.get(S.EXECUTING) or 0 < finished < total:
            summary_state = "executing"
        else:
            summary_state = "complete" if finished == total else "waiting"
    page = visible.order_by("created_at", "pk").values("agenda_id", "state", "percent_complete")[
        offset : offset + limit
    ]
    return {
        "link_id": link_id,
        "processing_state": summary_state,
        "percent_complete": round(percent, 2),
        "counts": counts,
        "total": total,
        "agendas": [
            {"id": row["agenda_id"], "state": row["state"], "percent": row["percent_complete"]}
            for row in page
        ],
    }


ID_PREFIX = re.compile(r"[0-9a-fA-F-]{8,35}")


def agenda_search(
    *,
    principal: Principal,
    state: str = "",
    customer_id: object = None,
    link_id: str = "",
    template_id: object = None,
    insight_id: object = None,
    text: str = "",
    labels: Iterable[tuple[str, str]] = (),
) -> QuerySet[Agenda]:
    """Visible agendas matching the page's filters, newest first, without their operations."""
    agendas = agenda_list(principal=principal).prefetch_related(None)
    if state:
        agendas = agendas_in_states(agendas, [state], principal=principal)
    if customer_id:
        agendas = agendas.filter(customer_id=customer_id)
    if link_id:
        agendas = agendas.filter(link_id=link_id)
    if template_id:
        agendas = agendas.filter(template_id=template_id)
    if insight_id:
        agendas = agendas.filter(insight_id=insight_id)
    agendas = labels_matching(agendas, labels)
    text = text.strip()
    if text:
        # Exact matches only, each served by an index: an id, an id prefix (the pages show
        # ids cut to 8 characters) as a range of the primary key, an external id, a link id.
        # A substring search would read every agenda of the history.
        try:
            agendas = agendas.filter(Q(pk=uuid.UUID(text)) | Q(external_id=text))
        except ValueError:
            matches = Q(external_id=text) | Q(link_id=text)
            digits = text.replace("-", "").lower()
            if ID_PREFIX.fullmatch(text) and len(digits) <= 32:
                matches |= Q(
                    pk__gte=uuid.UUID(digits.ljust(32, "0")),
                    pk__lte=uuid.UUID(digits.ljust(32, "f")),
                )
            agendas = agendas.filter(matches)
    return agendas.order_by("-created_at")


def agenda_action_job_list(*, principal: Principal) -> QuerySet[AgendaActionJob]:
    """Jobs of actions on a set the principal may read: their own; staff every job."""
    jobs = AgendaActionJob.objects.select_related("requested_by").order_by("-created_at")
    if principal_is_staff(principal):
        return jobs
    if not getattr(principal, "is_authenticated", False):
        return jobs.none()
    return jobs.filter(requested_by=principal)
