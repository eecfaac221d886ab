"""The timed processes (docs/design.md §8): promote due agendas, reclaim lapsed leases, time out
long runs, reap expired agendas. Unscoped: they serve the scheduler only.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Min, Q
from django.utils import timezone

from agendas import states
from agendas.models import Agenda, AgendaProgress, Execution
from agendas.states import TERMINAL, S
from audit.services import audit_events_expire
from resourcepools.models import Customer, Insight
from scheduling import metrics

logger = logging.getLogger("pop.scheduling")
Outcome = Execution.Outcome


def agendas_promote(*, now: datetime | None = None, batch_size: int = 1000) -> int:
    """Move pending agendas whose `run_after` passed to ready, in batches; return the count."""
    now = now or timezone.now()
    total = 0
    while True:
        with transaction.atomic():
            promoted = sum(states.progress_promote_due(now=now, limit=batch_size).values())
        total += promoted
        if promoted < batch_size:
            return total


def executions_reclaim(*, now: datetime | None = None, limit: int = 1000) -> int:
    """End executions whose lease expired: retry policy, or `aborted` when an abort was asked.

    One short transaction per execution; a progress row locked by an in-flight report is
    skipped (SKIP LOCKED) and looked at again next run, so two reclaimers never collide.
    """
    now = now or timezone.now()
    expired = list(
        Execution.objects.filter(outcome__isnull=True, lease_expires_at__lt=now)
        .order_by("lease_expires_at")
        .values_list("pk", "agenda_id")[:limit]
    )
    reclaimed = 0
    for execution_id, agenda_id in expired:
        with transaction.atomic():
            locked = _lock_open_execution(execution_id, agenda_id)
            if locked is None:
                continue
            progress, execution = locked
            if execution.lease_expires_at >= now:
                continue  # renewed by a report meanwhile
            since = execution.last_report_at or execution.started_at
            reason = (
                f"lease expired: no report from worker {execution.worker or '(unnamed)'} "
                f"since {since.isoformat()}"
            )
            outcome = _reclaim_outcome(progress, execution)
            _end_abandoned(progress, execution, outcome, reason, code="lease_expired", now=now)
            reclaimed += 1
    if reclaimed:
        metrics.RECLAIMS.inc(reclaimed)
        logger.info("reclaimed %d execution(s) with expired leases", reclaimed)
    return reclaimed


def _reclaim_outcome(progress: AgendaProgress, execution: Execution) -> str:
    """`unanswered` (no attempt used) for an execution that never reported — its pull's answer
    was most likely lost — up to `max_attempts` times per agenda, so a worker that dies on an
    agenda before its first report cannot loop it forever; `reclaimed` otherwise."""
    if execution.last_report_at is not None or progress.abort_requested:
        return Outcome.RECLAIMED
    earlier = Execution.objects.filter(
        agenda_id=execution.agenda_id, outcome=Outcome.UNANSWERED
    ).count()
    return Outcome.UNANSWERED if earlier < progress.agenda.max_attempts else Outcome.RECLAIMED


def executions_time_out(*, now: datetime | None = None, limit: int = 1000) -> int:
    """End executions running longer than their insight's `max_execution_seconds`, even while
    heartbeating (`timed_out` → retry policy). One short transaction per execution."""
    now = now or timezone.now()
    timed_out = 0
    for insight_id, max_seconds in Insight.objects.values_list("pk", "max_execution_seconds"):
        cutoff = now - timedelta(seconds=max_seconds)
        overdue = list(
            Execution.objects.filter(
                insight_id=insight_id, outcome__isnull=True, started_at__lt=cutoff
            )
            .order_by("started_at")
            .values_list("pk", "agenda_id")[:limit]
        )
        for execution_id, agenda_id in overdue:
            with transaction.atomic():
                locked = _lock_open_execution(execution_id, agenda_id)
                if locked is None:
                    continue
                progress, execution = locked
                reason = (
                    f"timed out: running since {execution.started_at.isoformat()}, longer than "
                    f"the insight's max_execution_seconds={max_seconds}"
                )
                _end_abandoned(
                    progress, execution, Outcome.TIMED_OUT, reason, code="timed_out", now=now
                )
                timed_out += 1
    if timed_out:
        metrics.TIMEOUTS.inc(timed_out)
        logger.info("timed out %d execution(s)", timed_out)
    return timed_out


def _lock_open_execution(
    execution_id: object, agenda_id: object
) -> tuple[AgendaProgress, Execution] | None:
    progress = (
        AgendaProgress.objects.select_for_update(skip_locked=True, of=("self",))
        .select_related("agenda", "agenda__customer")
        .filter(agenda_id=agenda_id)
        .first()
    )
    if progress is None:
        return None
    execution = Execution.objects.select_for_update().filter(pk=execution_id).first()
    if execution is None or execution.outcome is not None:
        return None
    return progress, execution


def _end_abandoned(
    progress: AgendaProgress,
    execution: Execution,
    outcome: str,
    reason: str,
    *,
    code: str,
    now: datetime,
) -> None:
    entry = states.diagnostic(reason, code=code, detail={"execution": str(execution.pk)}, now=now)
    if progress.current_execution_id != execution.pk or progress.state != S.EXECUTING:
        states.execution_close(execution, outcome, now=now, diagnostics=[entry])
        return
    if not progress.abort_requested:
        states.operations_fail_running(progress, message=reason, now=now)
    states.execution_end(progress, execution, outcome, now=now, message=reason, diagnostics=[entry])
    metrics.OUTCOMES.labels(outcome).inc()


def audit_events_reap(*, now: datetime | None = None) -> int:
    """Audit events older than POP_AUDIT_RETENTION_DAYS (unset: kept for ever)."""
    removed = audit_events_expire(
        retention_days=getattr(settings, "POP_AUDIT_RETENTION_DAYS", None),
        now=now or timezone.now(),
    )
    if removed:
        logger.info("removed %d audit event(s) past their retention", removed)
    return removed


REAP_BATCH_MAX = 1000


def agendas_reap(*, now: datetime | None = None, batch_size: int | None = None) -> int:
    """Delete terminal agendas older than their customer's `data_ttl_days`, with every row that
    depends on them, in batches of ≤ batch_size (POP_REAP_BATCH_SIZE, at most REAP_BATCH_MAX),
    one transaction each; never a non-terminal agenda. Return how many went.

    Set-based on PostgreSQL (docs/design.md §8.5): a batch is one statement whatever its size
    — it picks the batch over every customer at once, locks its progress rows (SKIP LOCKED: an
    agenda being rerun is left for the next reap) and deletes the rows of every table under
    them. Nothing expired costs two short queries, whatever the number of customers."""
    now = now or timezone.now()
    setting = int(getattr(settings, "POP_REAP_BATCH_SIZE", 1000))
    batch_size = max(1, min(batch_size or setting, REAP_BATCH_MAX))
    if connection.vendor == "postgresql":
        reaped = _reap_sql(now=now, batch_size=batch_size)
    else:
        reaped = _reap_orm(now=now, batch_size=batch_size)
    if reaped:
        logger.info("reaped %d terminal agenda(s)", reaped)
    return reaped


def _reap_sql(*, now: datetime, batch_size: int) -> int:
    """PostgreSQL: one statement a batch (`states.agendas_reap_batch`), each its own
    transaction; the next batch goes on from where the last one's rows ended."""
    shortest = Customer.objects.aggregate(shortest=Min("data_ttl_days"))["shortest"]
    if shortest is None:
        return 0
    bound = now - timedelta(days=shortest)
    after = ("", now)  # before every row: "" sorts before every state
    reaped = 0
    while True:
        with transaction.atomic(savepoint=False):
            count, after = states.agendas_reap_batch(
                now=now, bound=bound, after=after, limit=batch_size
            )
        reaped += count
        if count < batch_size:
            return reaped


def _reap_orm(*, now: datetime, batch_size: int) -> int:
    """Any database (the SQLite demo): per batch, one query over every customer — one
    condition per distinct TTL — then Django's collector deletes the batch."""
    ttls = list(Customer.objects.order_by().values_list("data_ttl_days", flat=True).distinct())
    if not ttls:
        return 0
    expired = Q()
    for ttl in ttls:
        expired |= Q(customer__data_ttl_days=ttl, completed_at__lt=now - timedelta(days=ttl))
    reaped = 0
    while True:
        with transaction.atomic(savepoint=False):
            ids = list(
                AgendaProgress.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(expired, state__in=TERMINAL)
                .values_list("agenda_id", flat=True)[:batch_size]
            )
            if ids:
                Agenda.objects.filter(pk__in=ids).delete()
        reaped += len(ids)
        if len(ids) < batch_size:
            return reaped
