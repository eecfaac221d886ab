"""Why an agenda is not executing (docs/design.md §6.5): a machine-readable code, a sentence,
and the figures behind it. Read on demand for one agenda (the API's detail, the agenda page,
`pop agendas show`); nothing on the fill, pull or report path computes or stores it. Every
count is bounded by a LIMIT, so the answer costs the same with any backlog.
"""

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from agendas.models import Agenda, AgendaDependency, AgendaProgress, AgendaWait, Execution
from agendas.queue_models import QueuedAgenda, ReadyAgenda, StartBucket

S = AgendaProgress.State
# Counts of agendas ahead stop here ("at least 1000"): the answer must not read a backlog.
COUNT_LIMIT = 1000
# Agendas an agenda waits for, named in its waiting reason and its `after` (the first ones).
UPSTREAMS_LISTED = 20


@dataclass(frozen=True)
class WaitingReason:
    code: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _bounded_count(rows, limit: int = COUNT_LIMIT) -> int:
    return rows[:limit].count()


def _amount(count: int, limit: int = COUNT_LIMIT) -> str:
    return f"at least {limit}" if count >= limit else str(count)


def _customer_at_cap(progress: AgendaProgress) -> WaitingReason | None:
    cap = progress.agenda.customer.max_executing
    if cap is None:
        return None
    queued = _bounded_count(QueuedAgenda.objects.filter(customer_id=progress.customer_id), cap)
    running = _bounded_count(
        Execution.objects.filter(customer_id=progress.customer_id, outcome__isnull=True), cap
    )
    if queued + running < cap:
        return None
    return WaitingReason(
        "customer_at_max_executing",
        f"Its customer has {cap} agendas queued or executing, its max_executing; the next fill "
        "after one of them ends can take it.",
        {"max_executing": cap},
    )


def _insight_at_limit(progress: AgendaProgress) -> WaitingReason | None:
    insight = progress.agenda.insight
    limit = insight.execution_limit
    if limit is None:
        return None
    running = _bounded_count(
        Execution.objects.filter(insight_id=insight.pk, outcome__isnull=True), limit
    )
    queued = _bounded_count(QueuedAgenda.objects.filter(insight_id=insight.pk), limit)
    if running + queued < limit:
        return None
    return WaitingReason(
        "insight_at_execution_limit",
        f"Insight {insight.name} has {limit} agendas queued or executing, its execution_limit.",
        {"insight": insight.name, "execution_limit": limit},
    )


def _rate_limited(progress: AgendaProgress, now: datetime) -> WaitingReason | None:
    """The customer's or the insight's rate limit has no whole token until some time."""
    agenda = progress.agenda
    for owner, scope, name in (
        (agenda.customer, "customer", agenda.customer.slug),
        (agenda.insight, "insight", agenda.insight.name),
    ):
        if owner.rate_limit is None:
            continue
        bucket = StartBucket.objects.filter(**{scope: owner}).first()
        if bucket is None:
            continue
        limit, period = owner.rate_limit, owner.rate_period_seconds
        until = bucket.next_token_at(now, limit=limit, period_seconds=period)
        if until > now:
            return WaitingReason(
                "rate_limited",
                f"The {scope} {name} started its {limit} agendas per {period} s; the next may "
                f"start at {until.isoformat()}.",
                {
                    "scope": scope,
                    "rate_limit": limit,
                    "period_seconds": period,
                    "until": until.isoformat(),
                },
            )
    return None


def _held_or_paused(progress: AgendaProgress) -> WaitingReason | None:
    agenda = progress.agenda
    if agenda.insight.paused:
        return WaitingReason(
            "insight_paused",
            f"Insight {agenda.insight.name} is paused: nothing is queued or handed out there "
            "until it is resumed.",
            {"insight": agenda.insight.name},
        )
    if agenda.customer.held:
        return WaitingReason(
            "customer_held",
            f"The customer {agenda.customer.slug} is held: none of its agendas is queued until "
            "it is released.",
            {"customer": agenda.customer.slug},
        )
    return None


def _ready(progress: AgendaProgress, now: datetime) -> WaitingReason:
    blocked = _held_or_paused(progress) or (
        _customer_at_cap(progress) or _insight_at_limit(progress) or _rate_limited(progress, now)
    )
    if blocked is not None:
        return blocked
    entry = ReadyAgenda.objects.filter(agenda_id=progress.agenda_id).first()
    if entry is None:  # moved on since the state was read
        return WaitingReason("moving", "It is being queued right now.")
    ahead = _bounded_count(
        ReadyAgenda.objects.filter(insight_id=entry.insight_id, customer_id=entry.customer_id)
        .filter(
            Q(priority__gt=entry.priority) | Q(priority=entry.priority, added_at__lt=entry.added_at)
        )
        .order_by()
    )
    insight = progress.agenda.insight
    return WaitingReason(
        "ready",
        f"Ready on insight {insight.name}: {_amount(ahead)} of its customer's agendas come first "
        f"there (higher priority or older); fills take the customers' turns by the insight's "
        f"{insight.get_scheduling_algorithm_display()} rule.",
        {"insight": insight.name, "customer_agendas_ahead": ahead, "ahead_limit": COUNT_LIMIT},
    )


def _queued(progress: AgendaProgress) -> WaitingReason:
    if progress.agenda.insight.paused:
        return _held_or_paused(progress)
    entry = QueuedAgenda.objects.filter(agenda_id=progress.agenda_id).first()
    if entry is None:
        return WaitingReason("moving", "It is being handed to a worker right now.")
    ahead = _bounded_count(
        QueuedAgenda.objects.filter(insight_id=entry.insight_id, position__lt=entry.position)
    )
    insight = progress.agenda.insight
    return WaitingReason(
        "queued",
        f"Queued on insight {insight.name} at position {ahead + 1}: the next pull of a worker "
        "of that insight takes the agendas in queue order.",
        {"insight": insight.name, "position": ahead + 1},
    )


def _waiting_for_agendas(progress: AgendaProgress) -> WaitingReason | None:
    wait = AgendaWait.objects.filter(agenda_id=progress.agenda_id, ended_at__isnull=True).first()
    if wait is None:
        return None
    upstreams = _upstreams_open(progress.agenda_id, progress.customer_id)
    noun = "agenda" if wait.remaining == 1 else "agendas"
    return WaitingReason(
        "waiting_for_agendas",
        f"waiting for {wait.remaining} {noun} to {'succeed' if wait.on == 'succeeded' else 'end'} "
        "(after): it becomes ready in the moment the last of them does.",
        {
            "remaining": wait.remaining,
            "total": wait.total,
            "on": wait.on,
            "agendas": [str(agenda_id) for agenda_id in upstreams],
            "agendas_limit": UPSTREAMS_LISTED,
        },
    )


def _upstreams_open(agenda_id: object, customer_id: object) -> list[object]:
    # Upstreams are the waiter's customer's (states.waits.AfterResolver); the filter keeps
    # any other out of what the waiter's readers see.
    return list(
        AgendaDependency.objects.filter(
            waiter_id=agenda_id, finished_at__isnull=True, upstream__customer_id=customer_id
        )
        .order_by("upstream_id")
        .values_list("upstream_id", flat=True)[:UPSTREAMS_LISTED]
    )


def agenda_after(agenda: Agenda) -> dict | None:
    """What the agenda waits (or waited) for, bounded: None when it was submitted without
    `after`; else its rule, the count left, when the wait ended, and the first agendas it waits
    for with their states (only ever its own customer's agendas)."""
    wait = AgendaWait.objects.filter(agenda_id=agenda.pk).first()
    if wait is None:
        return None
    rows = (
        AgendaDependency.objects.filter(
            waiter_id=agenda.pk, upstream__customer_id=agenda.customer_id
        )
        .order_by("upstream_id")
        .values_list("upstream_id", "upstream__progress__state", "finished_at")[:UPSTREAMS_LISTED]
    )
    return {
        "on": wait.on,
        "on_failure": wait.on_failure,
        "total": wait.total,
        "remaining": wait.remaining,
        "ended_at": wait.ended_at.isoformat() if wait.ended_at else None,
        "agendas": [
            {"id": str(upstream), "state": state, "finished": finished is not None}
            for upstream, state, finished in rows
        ],
        "agendas_limit": UPSTREAMS_LISTED,
    }


def _pending(progress: AgendaProgress, now: datetime) -> WaitingReason:
    if progress.do_not_run:
        return WaitingReason(
            "do_not_run", "Held (do_not_run): it runs only after a rerun or a resume."
        )
    waiting = _waiting_for_agendas(progress)
    if waiting is not None:
        return waiting
    if progress.run_after is not None and progress.run_after > now:
        return WaitingReason(
            "run_after",
            f"Waiting until {progress.run_after.isoformat()} (run_after: a delay or the backoff "
            "before a retry).",
            {"run_after": progress.run_after.isoformat()},
        )
    return WaitingReason(
        "promotion_due", "Eligible now: the next promote (every few seconds) makes it ready."
    )


def waiting_reason(progress: AgendaProgress, *, now: datetime | None = None) -> dict | None:
    """Why the agenda is not executing, or None when it is executing or finished."""
    now = now or timezone.now()
    state = progress.state
    if state == S.PAUSED:
        reason = WaitingReason("paused", "Paused: it waits for a resume.")
    elif state == S.PENDING:
        reason = _pending(progress, now)
    elif state == S.READY:
        reason = _ready(progress, now)
    elif state == S.QUEUED:
        reason = _queued(progress)
    else:
        return None
    return reason.as_dict()
