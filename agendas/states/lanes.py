"""Customer lanes kept in step with the ready set (docs/design.md §6.1).

A lane (`CustomerLane`) is active while its customer may have ready agendas on its insight;
the fill reads only active lanes. Two writers meet here:

- entering `ready` (submit, promote, a retry, resume, rerun) calls `lanes_wake` after writing
  the ready rows: a missing lane is created and an inactive one made active, starting at the
  insight's virtual time (no credit banked while idle), in one statement that leaves active
  lanes untouched. It reads the virtual time `FOR SHARE`: a fill of the insight in flight
  holds that row, and the waking lane must start at the level that fill leaves, not the one
  before it (else a newcomer would start a whole fill's worth of turns behind);
- the fill calls `lanes_sleep` for lanes it found empty.

They must never leave an inactive lane with ready agendas. On PostgreSQL every writer of ready
rows holds a *shared* advisory lock on the lane's key until it commits, and `lanes_sleep` takes
the same key with an exclusive *try*-lock, then looks for ready rows in a statement that starts
after the lock: it can only see a lane empty when no writer of that lane is in flight, and a
writer that comes later waits for the fill to commit and then finds the lane inactive. Shared
locks never wait for each other and the fill never waits at all, so no two of them deadlock.
An active lane is only read by a writer, never locked; an inactive one is locked only while it
is made active again. On SQLite writers are serialised (`BEGIN IMMEDIATE`) and none of this is
needed.
"""

import zlib
from collections.abc import Iterable
from datetime import datetime

from django.db import connection
from django.db.models import Q

from agendas.models import Execution
from agendas.queue_models import CustomerLane, InsightScheduleInfo, ReadyAgenda
from resourcepools.models import Customer, Insight

# First key of the two-int advisory lock form of lane keys: apart from POP's other locks.
LANE_LOCK_NAMESPACE = 0x504F504C  # "POPL"


def lane_lock_key(insight_id: object, customer_id: object) -> int:
    """A stable signed 32-bit key for a lane (collisions only cost a skipped sleep)."""
    return zlib.crc32(f"{insight_id}:{customer_id}".encode()) - 2**31


def lanes_wake(pairs: Iterable[tuple[object, object]]) -> None:
    """Make the lanes of these (insight id, customer id) pairs active; call after their ready
    rows are written, in the same transaction."""
    wanted = sorted(set(pairs), key=lambda pair: (str(pair[0]), str(pair[1])))
    if not wanted:
        return
    if connection.vendor != "postgresql":
        _lanes_upsert_portable(wanted)
        return
    keys = sorted({lane_lock_key(*pair) for pair in wanted})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock_shared(%s, k) FROM (SELECT unnest(%s::int[]) AS k "
            "ORDER BY 1) AS keys",
            [LANE_LOCK_NAMESPACE, keys],
        )
        # A new statement, so its snapshot sees any lane a fill put to sleep before our locks.
        cursor.execute(
            _UPSERT_SQL.format(lane=_table(CustomerLane), info=_table(InsightScheduleInfo)),
            [[str(insight) for insight, _ in wanted], [str(c) for _, c in wanted]],
        )


_UPSERT_SQL = """
INSERT INTO {lane} (insight_id, customer_id, active, served)
SELECT w.insight_id, w.customer_id, true,
       COALESCE((SELECT i.virtual_time FROM {info} i WHERE i.insight_id = w.insight_id
                 FOR SHARE), 0)
FROM unnest(%s::uuid[], %s::uuid[]) WITH ORDINALITY AS w(insight_id, customer_id, n)
WHERE NOT EXISTS (SELECT 1 FROM {lane} l WHERE l.insight_id = w.insight_id
                  AND l.customer_id = w.customer_id AND l.active)
ORDER BY w.n
ON CONFLICT (insight_id, customer_id) DO UPDATE
SET active = true, served = GREATEST({lane}.served, EXCLUDED.served)
WHERE NOT {lane}.active
"""


def _lanes_upsert_portable(waking: list[tuple[object, object]]) -> None:
    condition = Q(pk__in=[])
    for insight_id, customer_id in waking:
        condition |= Q(insight_id=insight_id, customer_id=customer_id)
    active = set(
        CustomerLane.objects.filter(condition, active=True).values_list("insight_id", "customer_id")
    )
    waking = [pair for pair in waking if pair not in active]
    if not waking:
        return
    start = dict(
        InsightScheduleInfo.objects.filter(
            insight_id__in={insight for insight, _ in waking}
        ).values_list("insight_id", "virtual_time")
    )
    for insight_id, customer_id in waking:
        lane, created = CustomerLane.objects.get_or_create(
            insight_id=insight_id,
            customer_id=customer_id,
            defaults={"active": True, "served": start.get(insight_id, 0.0)},
        )
        if not created and not lane.active:
            lane.active = True
            lane.served = max(lane.served, start.get(insight_id, 0.0))
            lane.save(update_fields=["active", "served"])


def lanes_sleep(insight_id: object, customer_ids: Iterable[object]) -> list[object]:
    """Make inactive those of the insight's lanes that have no ready agenda; return their
    customers. A lane some writer is adding to right now is left active (the fill looks again
    next time). Runs in the fill's transaction."""
    candidates = sorted(set(customer_ids), key=str)
    if not candidates:
        return []
    if connection.vendor != "postgresql":
        busy = set(
            ReadyAgenda.objects.filter(insight_id=insight_id, customer_id__in=candidates)
            .values_list("customer_id", flat=True)
            .distinct()
            .order_by()
        )
        empty = [c for c in candidates if c not in busy]
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT c FROM unnest(%s::uuid[], %s::int[]) AS t(c, k) "
                "WHERE pg_try_advisory_xact_lock(%s, k)",
                [
                    [str(c) for c in candidates],
                    [lane_lock_key(insight_id, c) for c in candidates],
                    LANE_LOCK_NAMESPACE,
                ],
            )
            locked = [row[0] for row in cursor.fetchall()]
            if not locked:
                return []
            # A new statement, so a new snapshot: every ready row of a locked lane is committed.
            cursor.execute(
                f"SELECT c FROM unnest(%s::uuid[]) AS c WHERE NOT EXISTS ("
                f"SELECT 1 FROM {_table(ReadyAgenda)} r "
                "WHERE r.insight_id = %s AND r.customer_id = c)",
                [locked, insight_id],
            )
            empty = [row[0] for row in cursor.fetchall()]
    if empty:
        CustomerLane.objects.filter(insight_id=insight_id, customer_id__in=empty).update(
            active=False
        )
    return empty


def _table(model: type) -> str:
    return connection.ops.quote_name(model._meta.db_table)


# What an agenda of a customer with no finished execution on the insight is charged at queue
# time, in seconds (fair share); corrected to the real time when it ends.
DEFAULT_COST_SECONDS = 10.0
# Weight of the newest execution in a lane's running mean of execution time.
MEAN_WEIGHT = 0.2


def usage_inflation(*, now: datetime, epoch: datetime | None, half_life_seconds: int) -> float:
    """Fair share's decay, kept by inflating new charges instead of deflating old ones: a
    charge made now counts 2^((now − epoch)/half-life) times one made at the epoch, so every
    lane's `served` keeps its order as time passes without being rewritten."""
    if epoch is None:
        return 1.0
    return 2.0 ** ((now - epoch).total_seconds() / half_life_seconds)


_CHARGE_SQL = """
WITH ended AS (
    SELECT * FROM unnest(%(insights)s::uuid[], %(customers)s::uuid[], %(seconds)s::float8[])
        AS e(insight_id, customer_id, seconds)
), per_lane AS (
    SELECT l.id, count(*) AS n, sum(e.seconds) AS seconds,
           max(i.usage_half_life_seconds) AS half_life, max(c.weight) AS weight,
           max(s.usage_epoch) AS epoch
    FROM ended e
    JOIN {lane} l ON l.insight_id = e.insight_id AND l.customer_id = e.customer_id
    JOIN {insight} i ON i.id = l.insight_id AND i.scheduling_algorithm = %(fair_share)s
    JOIN {customer} c ON c.id = l.customer_id
    LEFT JOIN {info} s ON s.insight_id = l.insight_id
    GROUP BY l.id
), charged AS (
    -- What the ended executions were charged when queued: the mean charge of the lane's
    -- pending agendas (all of it for the last ones), or the running mean if none is pending.
    SELECT p.*, CASE
        WHEN l.pending_count = 0 AND NOT %(learn)s THEN 0
        WHEN l.pending_count = 0 THEN p.n * COALESCE(l.mean_seconds, %(default)s)
        ELSE l.pending_charge * LEAST(p.n, l.pending_count) / l.pending_count
        END AS was_charged
    FROM per_lane p JOIN {lane} l ON l.id = p.id
)
UPDATE {lane} l
SET served = l.served + (ch.seconds - ch.was_charged)
        * power(2.0, EXTRACT(EPOCH FROM (%(now)s - COALESCE(ch.epoch, %(now)s))) / ch.half_life)
        / GREATEST(ch.weight, 1),
    pending_charge = CASE WHEN l.pending_count <= ch.n THEN 0
                     ELSE l.pending_charge - ch.was_charged END,
    pending_count = GREATEST(l.pending_count - ch.n, 0),
    mean_seconds = CASE WHEN NOT %(learn)s THEN l.mean_seconds
                   WHEN l.mean_seconds IS NULL THEN ch.seconds / ch.n
                   ELSE l.mean_seconds * (1 - %(mean_weight)s) + ch.seconds / ch.n * %(mean_weight)s
                   END
FROM charged ch WHERE l.id = ch.id
"""


def lanes_refund(insight_id: object, customer_id: object, *, now: datetime) -> None:
    """Fair share: give back the charge of an agenda that leaves its queue without running
    (paused, aborted)."""
    lanes_refund_many([(insight_id, customer_id)], now=now)


def lanes_refund_many(left: Iterable[tuple[object, object]], *, now: datetime) -> None:
    """`lanes_refund` for many agendas at once: (insight, customer) per agenda, one statement."""
    _lanes_correct([(insight, customer, 0.0) for insight, customer in left], now=now, learn=False)


def lanes_charge(ended: Iterable[Execution], *, now: datetime) -> None:
    """Fair share: correct what the lanes of these just-ended executions were charged when
    their agendas were queued (the declared `cost`, else the lane's running mean) to the time
    the executions really took, and update the running means. What each was charged is taken
    from the lane's pending charges as their mean, so every second charged is corrected once
    however the estimates moved meanwhile. Lanes of insights with another algorithm are left
    alone."""
    _lanes_correct(
        [
            (
                execution.insight_id,
                execution.customer_id,
                max(0.0, ((execution.ended_at or now) - execution.started_at).total_seconds()),
            )
            for execution in ended
            if _may_be_fair_share(execution)
        ],
        now=now,
        learn=True,
    )


def _may_be_fair_share(execution: Execution) -> bool:
    """False when the execution's insight is loaded and uses another algorithm (the report
    path loads it), so those reports skip the charge statement."""
    if not Execution.insight.is_cached(execution):
        return True
    return execution.insight.scheduling_algorithm == Insight.Algorithm.FAIR_SHARE


def _lanes_correct(rows: list[tuple[object, object, float]], *, now: datetime, learn: bool) -> None:
    """Correct the lanes of (insight id, customer id, seconds run) rows: see lanes_charge."""
    if not rows:
        return
    seconds = [row[2] for row in rows]
    if connection.vendor == "postgresql":
        sql = _CHARGE_SQL.format(
            lane=_table(CustomerLane),
            insight=_table(Insight),
            customer=_table(Customer),
            info=_table(InsightScheduleInfo),
        )
        with connection.cursor() as cursor:
            cursor.execute(
                sql,
                {
                    "insights": [str(row[0]) for row in rows],
                    "customers": [str(row[1]) for row in rows],
                    "seconds": seconds,
                    "default": DEFAULT_COST_SECONDS,
                    "fair_share": Insight.Algorithm.FAIR_SHARE,
                    "now": now,
                    "mean_weight": MEAN_WEIGHT,
                    "learn": learn,
                },
            )
        return
    for (insight_id, customer_id, _), took in zip(rows, seconds, strict=True):
        insight = Insight.objects.filter(
            pk=insight_id, scheduling_algorithm=Insight.Algorithm.FAIR_SHARE
        ).first()
        lane = CustomerLane.objects.filter(insight_id=insight_id, customer_id=customer_id).first()
        if insight is None or lane is None:
            continue
        weight = Customer.objects.filter(pk=customer_id).values_list("weight", flat=True).first()
        epoch = (
            InsightScheduleInfo.objects.filter(insight_id=insight_id)
            .values_list("usage_epoch", flat=True)
            .first()
        )
        if lane.pending_count:
            charged = lane.pending_charge / lane.pending_count
            lane.pending_charge = 0.0 if lane.pending_count == 1 else lane.pending_charge - charged
            lane.pending_count -= 1
        else:
            charged = (lane.mean_seconds or DEFAULT_COST_SECONDS) if learn else 0.0
        inflation = usage_inflation(
            now=now, epoch=epoch, half_life_seconds=insight.usage_half_life_seconds
        )
        lane.served += (took - charged) * inflation / max(weight or 1, 1)
        if learn:
            lane.mean_seconds = (
                took
                if lane.mean_seconds is None
                else lane.mean_seconds * (1 - MEAN_WEIGHT) + took * MEAN_WEIGHT
            )
        lane.save(update_fields=["served", "mean_seconds", "pending_charge", "pending_count"])
