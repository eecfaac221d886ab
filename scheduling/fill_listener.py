"""Fill nudges over PostgreSQL's LISTEN/NOTIFY (POP_FILL_NUDGE=notify, docs/design.md §6.2).

A nudge in this mode is one `pg_notify` after the commit that asks for it (agendas/fill_nudge.py):
no task row, no room check, no wait for the cluster's next poll of its task table. The ticker
(scheduling/tasks.py) listens on the channel between its ticks and fills each nudged insight as
the nudges arrive, several nudges of one insight at once in one fill. Nothing depends on a
notification arriving: one sent while no ticker listens (a link's hand-over, a cluster
restart) is dropped by PostgreSQL, and the periodic fill and the pulls' own fills pick the work
up, as they do for a lost nudge task.
"""

import logging
import math
import time
import uuid

import psycopg
from django.conf import settings
from django.db import DatabaseError, connection

from agendas.fill_nudge import FILL_NUDGE_CHANNEL, fill_nudge_mode
from scheduling import fill as fill_service

logger = logging.getLogger("pop.scheduling")
# The psycopg connection this process LISTENs on: a new one (Django reconnected) must LISTEN again.
_listening_on: object = None
# Per insight: when its last nudged fill started, and when a deferred one falls due (monotonic).
_filled_at: dict[uuid.UUID, float] = {}
_due: dict[uuid.UUID, float] = {}


def fill_nudged_until(deadline: float) -> int:
    """Until `deadline` (time.time()), fill each insight nudged over NOTIFY as its nudges
    arrive; return the number of fills. Without the notify mode it only sleeps; so it does
    after losing the database, which the ticker's next tick reconnects to (and listens on
    again)."""
    if fill_nudge_mode() != "notify":
        _sleep_until(deadline)
        return 0
    interval = float(getattr(settings, "POP_FILL_LISTEN_INTERVAL", 0.05))
    fills = 0
    try:
        listener = _listening_connection()
        while (remaining := deadline - time.time()) > 0:
            next_due = min(_due.values(), default=math.inf) - time.monotonic()
            wait = max(0.0, min(remaining, next_due))
            nudged = {n.payload for n in listener.notifies(timeout=wait, stop_after=1)}
            nudged |= {n.payload for n in listener.notifies(timeout=0)}
            for insight_id in _insight_ids(nudged):
                # At most one nudged fill per insight within the interval: a nudge inside it
                # is deferred to its end, never dropped. A short queue drained by every pull
                # would otherwise be refilled here after each one, in fills of a few rows that
                # race the pulls' own inline fills (docs/decisions.md).
                _due.setdefault(insight_id, _filled_at.get(insight_id, -math.inf) + interval)
            fills += _fill_due()
    except (DatabaseError, psycopg.Error) as error:
        # Nudges sent meanwhile are lost; the periodic fill and the pulls' fills cover them.
        logger.warning("fill nudges: not listening until the next tick (%s)", error)
        connection.close()
        _sleep_until(deadline)
    return fills


def _fill_due() -> int:
    """Fill each insight whose nudged fill has fallen due; return how many fills ran."""
    now = time.monotonic()
    fills = 0
    for insight_id in sorted(pk for pk, at in _due.items() if at <= now):
        del _due[insight_id]
        _filled_at[insight_id] = time.monotonic()
        try:
            fill_service.insight_fill(insight_id=insight_id)
            fills += 1
        except Exception:  # one insight's error spares the others, as in the periodic fill
            # (a lost connection shows at the next wait, handled by the caller).
            logger.exception("nudged fill of insight %s failed", insight_id)
    return fills


def _sleep_until(deadline: float) -> None:
    time.sleep(max(0.0, deadline - time.time()))


def _listening_connection():
    """Django's connection of this thread, listening on the nudge channel."""
    global _listening_on
    connection.ensure_connection()
    raw = connection.connection
    if _listening_on is not raw:
        with connection.cursor() as cursor:
            cursor.execute(f"LISTEN {FILL_NUDGE_CHANNEL}")
        _listening_on = raw
    return raw


def _insight_ids(payloads: set[str]) -> set[uuid.UUID]:
    found = set()
    for payload in payloads:
        try:
            found.add(uuid.UUID(payload))
        except ValueError:
            logger.warning("fill nudge with a payload that is no insight id: %.60r", payload)
    return found
