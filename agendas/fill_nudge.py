"""Fill nudges (docs/design.md §6.2): after a commit, ask for a fill of each insight whose queue
has room.

Entering `ready` asks for a fill of the agenda's insight once the transaction commits; so does
a pull that leaves the queue under half full or finds it empty while work is ready. Nudges are
throttled per process and insight (POP_FILL_NUDGE_MIN_INTERVAL), but never dropped: a nudge
inside the throttle window arms one trailing nudge for the window's end. The periodic fill
stays the backstop (a process that exits loses its pending trailing nudge). The task a nudge
enqueues is named by the POP_FILL_NUDGE_TASK setting.

Nudges are also coalesced across processes: at most one fill task per insight waits for the
cluster (`PendingFillNudge`), so a cluster outage leaves one task per insight to replay, not
one per nudge.

With POP_FILL_NUDGE=notify (PostgreSQL) a nudge is one `pg_notify` on FILL_NUDGE_CHANNEL
instead of a task: the ticker listens and fills (scheduling/fill_listener.py).
"""

import logging
import math
import os
import threading
import time
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, F
from django.utils import timezone
from django_q.tasks import async_task

from agendas.queue_models import PendingFillNudge
from core.after_commit import after_commit
from resourcepools.models import Insight

# --- Fill nudges (docs/design.md §6.2) ------------------------------------------------------------
# Entering `ready` asks for a fill of the agenda's insight once the transaction commits; so
# does a pull that leaves the queue under half full or finds it empty while work is ready.
# Nudges are throttled per process and insight (POP_FILL_NUDGE_MIN_INTERVAL), but never
# dropped: a nudge inside the throttle window arms one trailing nudge for the window's end.
# The periodic fill stays the backstop (a process that exits loses its pending trailing nudge).
nudge_logger = logging.getLogger("pop.agendas.nudges")
_last_nudge: dict[str, float] = {}
# Pending trailing nudges: insight id -> (when it falls due, on the monotonic clock; mode).
_trailing_nudges: dict[str, tuple[float, str]] = {}
_nudge_lock = threading.Lock()
_nudge_wakeup = threading.Condition(_nudge_lock)
_nudge_thread: threading.Thread | None = None
# The LISTEN/NOTIFY channel of POP_FILL_NUDGE=notify; each payload is one insight id.
FILL_NUDGE_CHANNEL = "pop_fill_nudge"


def fill_nudge_mode() -> str:
    """POP_FILL_NUDGE: `notify` is read as `async` off PostgreSQL, which has no LISTEN/NOTIFY."""
    mode = getattr(settings, "POP_FILL_NUDGE", "async")
    if mode == "notify" and connection.vendor != "postgresql":
        return "async"
    return mode


def fill_nudge(insight_ids: Iterable[object]) -> None:
    """After commit, ask for a fill of each insight (POP_FILL_NUDGE): a task for those whose
    queue has room, or a notification."""
    mode = fill_nudge_mode()
    ids = sorted({str(insight_id) for insight_id in insight_ids})
    if not ids or mode == "off":
        return
    after_commit(_fill_nudge_now, ids, mode)


def _fill_nudge_now(insight_ids: list[str], mode: str) -> None:
    """Nudge each insight now, or, inside its throttle window, once at the window's end.

    Throttled per process: a burst of submits to one insight enqueues one fill at once and one
    trailing fill when POP_FILL_NUDGE_MIN_INTERVAL has passed since, which sees every agenda
    the burst committed. At most one trailing nudge is pending per insight per process (later
    nudges in the window ride on it); one daemon thread per process sends them when they fall
    due, with the same room check and enqueue (`sync`: the fill itself), on one database
    connection it keeps between them.
    """
    interval = float(getattr(settings, "POP_FILL_NUDGE_MIN_INTERVAL", 0.02))
    clock = time.monotonic()
    due = []
    with _nudge_lock:
        for pk in insight_ids:
            wait = _last_nudge.get(pk, -math.inf) + interval - clock
            if wait <= 0:
                due.append(pk)
            elif pk not in _trailing_nudges:
                _trailing_nudges[pk] = (clock + wait, mode)
                _trailing_thread_running()
                _nudge_wakeup.notify()
    if due:
        _fill_nudge_send(due, mode)


def _trailing_thread_running() -> None:
    # Called with _nudge_lock held.
    global _nudge_thread
    if _nudge_thread is None or not _nudge_thread.is_alive():
        _nudge_thread = threading.Thread(
            target=_trailing_nudges_loop, name="pop-fill-nudges", daemon=True
        )
        _nudge_thread.start()


def _trailing_nudges_loop() -> None:
    """Send each pending trailing nudge when it falls due, forever (a daemon thread).

    One thread and one connection per process: a thread per nudge opened and closed a
    database connection per nudge, up to 1/POP_FILL_NUDGE_MIN_INTERVAL a second per insight.
    """
    while True:
        with _nudge_wakeup:
            if _nudge_thread is not threading.current_thread():
                connection.close()  # stopped (fill_nudges_cancel): leave no connection behind
                return
            now = time.monotonic()
            ready = [(pk, mode) for pk, (at, mode) in _trailing_nudges.items() if at <= now]
            if not ready:
                next_at = min((at for at, _ in _trailing_nudges.values()), default=None)
                _nudge_wakeup.wait(None if next_at is None else next_at - now)
                continue
            for pk, _ in ready:
                del _trailing_nudges[pk]
        for pk, mode in ready:
            try:
                connection.close_if_unusable_or_obsolete()
                _fill_nudge_send([pk], mode)
            except Exception:
                # Best effort, like every nudge: the periodic fill picks the work up.
                nudge_logger.exception("trailing fill nudge of insight %s failed", pk)
                connection.close()  # a broken connection is opened afresh next time


def _fill_nudge_send(insight_ids: list[str], mode: str) -> None:
    if mode == "notify":
        # The listener's fill checks the room itself, in the same lock as its moves.
        _mark_nudged(insight_ids)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify(%s, id) FROM unnest(%s::text[]) AS id",
                [FILL_NUDGE_CHANNEL, insight_ids],
            )
        return
    with_room = (
        Insight.objects.filter(pk__in=insight_ids)
        .annotate(queued=Count("queued_agendas"))
        .filter(queued__lt=F("queue_size"))
        .values_list("pk", flat=True)
    )
    for insight_id in with_room:
        _mark_nudged([str(insight_id)])
        if mode != "sync" and not _nudge_pending_claim(insight_id):
            continue  # a fill task of this insight is already waiting for the cluster
        async_task(
            settings.POP_FILL_NUDGE_TASK,
            str(insight_id),
            sync=mode == "sync",
            group="pop-fill-nudge",
            save=False,
        )


def _mark_nudged(insight_ids: list[str]) -> None:
    """Start each insight's throttle window (POP_FILL_NUDGE_MIN_INTERVAL) now."""
    with _nudge_lock:
        for pk in insight_ids:
            _last_nudge[pk] = time.monotonic()


# A pending nudge older than this no longer holds others back (its task may have been lost).
NUDGE_PENDING_SECONDS = 60.0


def _nudge_pending_claim(insight_id: object) -> bool:
    """Record that a fill task of the insight is about to be enqueued; False when one is
    already waiting (enqueued less than NUDGE_PENDING_SECONDS ago and not started): one
    conditional upsert, on PostgreSQL and SQLite alike. The task drops the row as it starts
    (`fill_nudge_started`)."""
    now = timezone.now()
    ops = connection.ops
    table = ops.quote_name(PendingFillNudge._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (insight_id, enqueued_at) VALUES (%s, %s) "
            f"ON CONFLICT (insight_id) DO UPDATE SET enqueued_at = excluded.enqueued_at "
            f"WHERE {table}.enqueued_at < %s RETURNING insight_id",
            [
                Insight._meta.pk.get_db_prep_value(insight_id, connection),
                ops.adapt_datetimefield_value(now),
                ops.adapt_datetimefield_value(now - timedelta(seconds=NUDGE_PENDING_SECONDS)),
            ],
        )
        return cursor.fetchone() is not None


def fill_nudge_started(insight_id: object) -> None:
    """The nudged fill task starts: later nudges may enqueue another (it will see their work)."""
    PendingFillNudge.objects.filter(insight_id=insight_id).delete()


def _fill_nudges_after_fork() -> None:
    # A forked child (gunicorn, django-q workers, bench roles) inherits the pending nudges but
    # not the thread that sends them: forget them, or the child would count on a trailing
    # nudge that never fires. The lock may have been held by another thread at fork time:
    # make a new one.
    global _nudge_lock, _nudge_wakeup, _nudge_thread
    _nudge_lock = threading.Lock()
    _nudge_wakeup = threading.Condition(_nudge_lock)
    _nudge_thread = None
    _trailing_nudges.clear()


os.register_at_fork(after_in_child=_fill_nudges_after_fork)


def fill_nudges_cancel(*, timeout: float = 10.0) -> None:
    """Forget throttle state and pending trailing nudges, and stop the thread that sends them,
    which closes its database connection (tests, process shutdown)."""
    global _nudge_thread
    with _nudge_wakeup:
        thread, _nudge_thread = _nudge_thread, None
        _trailing_nudges.clear()
        _last_nudge.clear()
        _nudge_wakeup.notify_all()
    if thread is not None and thread is not threading.current_thread():
        thread.join(timeout)
