"""django-q2 entry points (docs/design.md §8). Each takes ids or nothing, calls one service, and is
safe
to run twice at once. How the sub-minute periods run: see scheduling/recurring.py."""

import logging
import time
import uuid

from django.conf import settings
from django.core.cache import cache
from django.db import InterfaceError, OperationalError, close_old_connections, connection
from django.utils.module_loading import import_string
from django_q.models import Schedule as QSchedule
from django_q.tasks import async_task

from agendas.bulk_actions import agenda_action_job_running, agenda_action_jobs_run
from agendas.fill_nudge import fill_nudge_started
from core.throttling import throttle_counters_prune
from scheduling import fill as fill_service
from scheduling import timed as timed_service
from scheduling.alerts import alerts_evaluate
from scheduling.callbacks import callbacks_deliver
from scheduling.cron_services import schedules_run_due
from scheduling.fill_listener import fill_nudged_until
from scheduling.locks import single_flight
from scheduling.recurring import TICKER_FUNC, TICKER_NAME, ticked

logger = logging.getLogger("pop.scheduling")
# Well inside Q_CLUSTER["timeout"] (300 s).
ACTIONS_TASK_SECONDS = 120.0


def insight_fill(insight_id: str) -> int:
    """Fill one insight's queue (the on-commit nudge of docs/design.md §6.2)."""
    fill_nudge_started(insight_id)
    return fill_service.insight_fill(insight_id=insight_id).moved


def fill() -> int:
    """Fill every insight with room and ready work; one insight's error spares the others."""
    moved = 0
    for insight_id in fill_service.insights_to_fill():
        try:
            moved += fill_service.insight_fill(insight_id=insight_id).moved
        except Exception:  # this task's outermost loop: log, go on with the next insight
            logger.exception("fill of insight %s failed", insight_id)
    return moved


def promote() -> int:
    """Pending agendas whose run_after passed → ready."""
    return timed_service.agendas_promote()


def reclaim() -> int:
    """Executions whose lease expired → retry policy (or aborted)."""
    return timed_service.executions_reclaim()


def time_out() -> int:
    """Executions past their insight's max_execution_seconds → timed_out failure."""
    return timed_service.executions_time_out()


def reap() -> int:
    """Terminal agendas past their customer's TTL → deleted; audit events past
    POP_AUDIT_RETENTION_DAYS (when set) too; and the throttle counters of ended windows
    (not counted in the answer)."""
    throttle_counters_prune()
    return timed_service.agendas_reap() + timed_service.audit_events_reap()


def callbacks() -> int:
    """Deliver due customer callbacks from the outbox; returns the attempts made.

    One run at a time across the cluster(s): a run still busy with slow receivers makes the
    next period's copy return at once instead of taking another worker."""
    with single_flight("callbacks") as mine:
        if not mine:
            return 0
        run = callbacks_deliver()
    return run.delivered + run.retried + run.failed


def cron() -> int:
    """Fire due cron schedules and expire ended ones; returns the agendas created."""
    return schedules_run_due().fired


def alerts() -> int:
    """Evaluate alert rules, open/resolve alerts and notify; returns the rules evaluated.
    One run at a time, like callbacks (notices go out over the network)."""
    with single_flight("alerts") as mine:
        return alerts_evaluate().evaluated if mine else 0


def agenda_actions(job_id: str | None = None) -> int:
    """Work through a job of actions on a set of agendas (the nudge when it is recorded), or
    through the jobs nobody is running (the timed process); returns the batches done. A job
    still running when this task's time is up is handed to a fresh task."""
    batches = agenda_action_jobs_run(job_id=job_id, seconds=ACTIONS_TASK_SECONDS)
    if job_id is not None and agenda_action_job_running(job_id):
        async_task(settings.POP_ACTIONS_TASK, job_id, group="pop-actions", save=False)
    return batches


def ticker_generation() -> str:
    """Identity of the current ticker chain: the ticker schedule's next run, as the scheduler
    last set it when it spawned a ticker ("" when the schedule is not registered)."""
    next_run = QSchedule.objects.filter(name=TICKER_NAME).values_list("next_run", flat=True).first()
    return next_run.isoformat() if next_run else ""


def ticker(generation: str | None = None, due: dict[str, float] | None = None) -> str:
    """Run the sub-minute processes at their periods for one link of a self-renewing chain.

    A ticker started by the scheduler (or `pop_schedules`) opens a chain named after the
    schedule's current `next_run`; each link runs for POP_TICKER_LINK_SECONDS, then enqueues
    the next link with the processes' next due times. When the scheduler spawns the next
    ticker a minute later, `next_run` moves on and the old chain stops at its next check, so
    one chain runs at a time and a dead chain is replaced within a minute or so. Short links
    keep a cluster's shutdown quick (workers finish their task before the cluster exits).
    """
    link_seconds = float(getattr(settings, "POP_TICKER_LINK_SECONDS", 10.0))
    ends = time.time() + link_seconds
    current = _through_outages(ticker_generation, until=ends)
    if generation is None:
        generation = current
    elif current is not None and generation != current:
        return "superseded"
    entries = ticked()
    due = dict(due or {})
    link = uuid.uuid4().hex
    while True:
        if not connection.in_atomic_block:
            close_old_connections()  # honour CONN_MAX_AGE and drop broken connections
        ticker_beat(link)
        now = time.time()
        for entry in entries:
            if now >= due.get(entry.name, 0.0):
                due[entry.name] = now + entry.period
                _run(entry.name, entry.func, entry.run)
        if time.time() >= ends:
            break
        wake = min([*(due.get(entry.name, 0.0) for entry in entries), ends])
        # Sleeps, or with POP_FILL_NUDGE=notify fills the insights nudged meanwhile.
        fill_nudged_until(min(wake, ends))
        current = _through_outages(ticker_generation, until=ends)
        if current is not None and current != generation:
            return "superseded"
    # The next link must be enqueued whatever the database just went through: a chain that
    # ends here stops promote, reclaim and the fills until the minute schedule restarts one;
    # unless another chain has beaten since this link last did (this one was given up for
    # dead during an outage and replaced): then two would run on, each holding a task worker.
    if _another_chain_beats(link):
        return "superseded"
    enqueued = _through_outages(
        lambda: async_task(TICKER_FUNC, generation, due, group=TICKER_NAME) or True,
        until=time.time() + TICKER_ENQUEUE_SECONDS,
    )
    return "renewed" if enqueued else "broken"


# The chain's heartbeat (docs/design.md §8.1): every link writes it at least every
# TICKER_BEAT_SECONDS while it runs, in the shared cache; a chain silent for a link's length
# died with its cluster, and `ticker_revive` (run by every cluster's task-queue reader,
# scheduling/q_broker.py) starts a new one instead of leaving promote, reclaim and the fills
# stopped until the minute schedule spawns the next ticker (up to a minute and a half).
TICKER_BEAT_KEY = "pop-ticker-beat"
TICKER_BEAT_SECONDS = 1.0
_last_beat = {"link": "", "at": 0.0}  # this process's last beat written


def ticker_beat(link: str) -> None:
    """Say the chain is alive: {"at", "link"} (at most once a TICKER_BEAT_SECONDS per link)."""
    now = time.time()
    if _last_beat["link"] == link and now - _last_beat["at"] < TICKER_BEAT_SECONDS:
        return
    try:
        cache.set(TICKER_BEAT_KEY, {"at": now, "link": link}, timeout=None)
        _last_beat.update(link=link, at=now)
    except Exception as error:  # a beat lost to an outage must not stop the link's work
        logger.warning("ticker: heartbeat not written (%s)", error)


def _beat_at(beat: object) -> float | None:
    if isinstance(beat, dict):
        return float(beat.get("at") or 0.0)
    return float(beat) if isinstance(beat, int | float) else None


def _another_chain_beats(link: str) -> bool:
    """Whether the last beat is another link's, newer than this link's own last one."""
    try:
        beat = cache.get(TICKER_BEAT_KEY)
    except Exception:  # unknown: carry on, as before the heartbeat existed
        return False
    mine = _last_beat["at"] if _last_beat["link"] == link else 0.0
    other = isinstance(beat, dict) and beat.get("link") != link
    return bool(other and mine and (_beat_at(beat) or 0.0) > mine)


def ticker_stale_seconds() -> float:
    """How long the chain may be silent before it counts as dead: one link (at least 3 s)."""
    return max(3.0, float(getattr(settings, "POP_TICKER_LINK_SECONDS", 10.0)))


def ticker_revive() -> bool:
    """Start a new ticker chain when the registered one has not beaten for
    `ticker_stale_seconds` (the cluster running it died); True when it started one.

    One process decides at a time (a single-flight lock) and counts the new chain as alive at
    once, so the clusters start one chain, not one each. A chain only slow to be picked up
    (every task worker busy, or a link retrying through an outage) gets a twin for a link:
    the one whose beat is older stops at its link's end (`_another_chain_beats`), and each
    timed process is safe to run twice at once meanwhile (scheduling/recurring.py).
    A cache that has never seen a beat (a fresh start: `pop_schedules` queued a ticker) is
    given one link's time first.
    """
    stale = ticker_stale_seconds()
    beat_at = _beat_at(cache.get(TICKER_BEAT_KEY))
    if beat_at is None:
        cache.add(TICKER_BEAT_KEY, {"at": time.time(), "link": ""}, timeout=None)
        return False
    if time.time() - beat_at < stale:
        return False
    if not QSchedule.objects.filter(name=TICKER_NAME).exists():
        return False  # not registered (`pop_schedules` never ran): nothing to keep alive
    with single_flight("ticker-revive") as mine:
        beat_at = _beat_at(cache.get(TICKER_BEAT_KEY))
        if not mine or (beat_at is not None and time.time() - beat_at < stale):
            return False
        cache.set(TICKER_BEAT_KEY, {"at": time.time(), "link": "revived"}, timeout=None)
        async_task(TICKER_FUNC, group=TICKER_NAME)
    silent = time.time() - (beat_at or 0.0)
    logger.warning("ticker: no heartbeat for %.0f s; started a new chain", silent)
    return True


# How long a link keeps trying to enqueue the next one through a database outage (well inside
# TICKER_MAX_SECONDS); after that the minute schedule starts a new chain.
TICKER_ENQUEUE_SECONDS = 60.0
OUTAGE_BACKOFF_SECONDS = (0.25, 0.5, 1.0, 2.0)


def _through_outages(call, *, until: float):
    """`call()`, retried through database outages (connection refused, restart, "too many
    clients") with a short backoff until `until`; None if it never got through."""
    attempt = 0
    while True:
        try:
            return call()
        except (OperationalError, InterfaceError) as error:
            if time.time() >= until:
                logger.error("ticker: the database stayed unreachable (%s)", error)
                return None
            delay = OUTAGE_BACKOFF_SECONDS[min(attempt, len(OUTAGE_BACKOFF_SECONDS) - 1)]
            logger.warning("ticker: database unreachable (%s); retrying in %.2f s", error, delay)
            if not connection.in_atomic_block:
                connection.close()  # a broken connection is opened afresh next time
            time.sleep(min(delay, max(0.0, until - time.time())))
            attempt += 1


def _run(name: str, func: str, mode: str) -> None:
    try:
        if mode == "enqueue":
            async_task(func, group=name, save=False)
        else:
            import_string(func)()
    except Exception:  # the ticker's outermost loop: one failing process must not stop the rest
        logger.exception("timed process %s failed", name)
