"""The reaper's set-based delete (docs/design.md §8.5): one batch of expired terminal agendas,
with every row under them, in one statement. `scheduling.timed.agendas_reap` runs the batches
(and the ORM form on databases other than PostgreSQL).
"""

from datetime import datetime
from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import CASCADE, DO_NOTHING, SET_NULL, Model
from django.db.models.deletion import get_candidate_relations_to_delete

from agendas.models import Agenda, AgendaProgress
from agendas.states.machine import TERMINAL
from resourcepools.models import Customer

# Rows beside an agenda that carry no foreign-key constraint in the database (the field's
# `db_constraint=False`; Django still cascades them): queue membership, the callback outbox,
# `after` waits and trigger firings. Every deleted agenda made PostgreSQL probe each table
# that references agendas at commit — 11 probes per agenda once waits and firings came, most
# of a reap's time at a million agendas — and every ready or queued row's insert took a key
# lock on its agenda. Integrity holds without them: the state machine deletes queue rows as
# an agenda leaves `ready`/`queued` and only terminal agendas are reaped; the reap deletes
# (or nulls) all of these in its own statement, and tests/scheduling/test_reap_setbased.py
# checks that no row is left pointing at a reaped agenda (docs/decisions.md).
AGENDA_SIDE_ROWS: frozenset[tuple[str, str]] = frozenset(
    {
        ("ReadyAgenda", "agenda"),
        ("QueuedAgenda", "agenda"),
        ("CallbackDelivery", "agenda"),
        ("AgendaWait", "agenda"),
        ("AgendaDependency", "waiter"),
        ("AgendaDependency", "upstream"),
        ("TriggerFiring", "agenda"),
    }
)

# The history's own links, also without a database constraint (docs/decisions.md, "The
# history's links carry no database constraint"): a progress row to its agenda and to its
# current execution, an execution to its agenda, an operation to its progress. Each deleted
# parent cost PostgreSQL one probe of the child table at commit — 4,100 probes for a batch of
# 1,000 agendas, 60% of a reap at a million agendas (9,853 → 24,187 agendas/s without them) —
# and every insert of a progress, operation or execution row a key lock on its parent. These
# rows are written only by agendas/states/ in the transaction that writes their parent, and
# deleted only with it (here, or by Django's cascade); every row's customer and insight keep
# their constraints.
AGENDA_HISTORY_LINKS: frozenset[tuple[str, str]] = frozenset(
    {
        ("AgendaProgress", "agenda"),
        ("AgendaProgress", "current_execution"),
        ("Execution", "agenda"),
        ("OperationProgress", "agenda_progress"),
    }
)

# SET_NULL relations whose rows always belong to the same agenda as the row they point at, so
# the reap deletes them in the same statement and never needs to null them: a progress row's
# `current_execution` is an execution of its own agenda (claim.py sets it). Skipping that
# UPDATE saves a probe of the progress index per execution (a batch of 1,000 at a million
# agendas, warm: 55 → 42–44 ms in EXPLAIN ANALYZE); were the rule ever broken, a pointer would
# dangle (tests/scheduling/test_reap_setbased.py checks that none does).
OWN_AGENDA_SET_NULL: frozenset[tuple[str, str]] = frozenset(
    {("AgendaProgress", "current_execution")}
)

# The pick: terminal progress rows in (state, completed_at) order — the index
# progress_state_completed — from where the last batch ended and only below the cutoff of the
# shortest TTL (nothing expired: an empty index range), checked against their own customer's
# TTL, locked, skipping rows locked elsewhere (an agenda being rerun is left for the next
# reap). The lock re-checks a row changed since the statement began: a rerun that committed
# meanwhile is no longer terminal and drops out. A customer with a longer TTL than the
# shortest has its rows between the two cutoffs read, not deleted, once per reap.
PICK = f"""
SELECT p.agenda_id, p.state, p.completed_at
FROM {AgendaProgress._meta.db_table} p
JOIN {Customer._meta.db_table} c ON c.id = p.customer_id
WHERE p.state IN ({", ".join(f"'{state}'" for state in sorted(TERMINAL))})
  AND (p.state, p.completed_at) >= (%(state)s, %(completed_at)s)
  AND p.completed_at < %(bound)s
  AND p.completed_at < %(now)s - c.data_ttl_days * interval '1 day'
ORDER BY p.state, p.completed_at
LIMIT %(limit)s
FOR UPDATE OF p SKIP LOCKED
"""


def agendas_reap_batch(
    *, now: datetime, bound: datetime, after: tuple[str, datetime], limit: int
) -> tuple[int, tuple[str, datetime] | None]:
    """PostgreSQL, in the caller's transaction: delete up to `limit` terminal agendas whose
    progress completed before `bound` and before `now` less their customer's TTL, from the
    position `after` = (state, completed_at) on, with every row under them. Returns how many
    went and the position of the last one."""
    params = {"now": now, "bound": bound, "state": after[0], "completed_at": after[1]}
    with connection.cursor() as cursor:
        cursor.execute(reap_statement(), {**params, "limit": limit})
        last = cursor.fetchone()
    return (last[2], last[:2]) if last else (0, None)


@cache
def reap_statement() -> str:
    """One batch in one statement: the pick, then a data-modifying CTE per table that depends
    on the picked agendas, read off the models as Django's collector would — CASCADE relations
    deleted, SET_NULL ones set to NULL (except in rows deleted here too), DO_NOTHING ones
    left; any other on_delete stops the reap until it is handled here. The agendas' ids never
    leave the server. Returns the batch's last row (state, completed_at) and its size."""
    deletes: list[tuple[type[Model], str, list]] = []
    _collect_deletes(
        Agenda, "ANY(ARRAY(SELECT agenda_id FROM picked))", Agenda._meta.pk.column, deletes
    )
    deleted_where: dict[type[Model], list[str]] = {}
    for model, where, _ in deletes:
        deleted_where.setdefault(model, []).append(where)
    ctes = [f"picked AS ({PICK.strip()})"]
    for number, (model, where, set_null) in enumerate(deletes):
        delete = f"DELETE FROM {_quoted(model._meta.db_table)} WHERE {where}"
        if set_null:
            targets = sorted({_quoted(target) for _, _, target in set_null})
            delete += f" RETURNING {', '.join(targets)}"
        ctes.append(f"d{number} AS ({delete})")
        for other, (child, column, target) in enumerate(set_null):
            # Not in rows this statement deletes: one row changed twice in one statement is
            # changed once, and the update could be the one that wins.
            spared = " OR ".join(f"({w})" for w in deleted_where.get(child, ()))
            update = (
                f"UPDATE {_quoted(child._meta.db_table)} SET {_quoted(column)} = NULL "
                f"WHERE {_quoted(column)} = ANY(ARRAY(SELECT {_quoted(target)} FROM d{number}))"
            )
            if spared:
                update += f" AND NOT ({spared})"
            ctes.append(f"d{number}_null{other} AS ({update})")
    return (
        f"WITH {', '.join(ctes)} "
        "SELECT state, completed_at, count(*) OVER () FROM picked "
        "ORDER BY state DESC, completed_at DESC LIMIT 1"
    )


def _collect_deletes(model: type[Model], ids: str, direct: str, deletes: list, depth: int = 0):
    """Append (model, where, set-null relations) for `model`'s rows whose `direct` column is
    in `ids`, its dependents first."""
    if depth > 5:
        raise ImproperlyConfigured(f"reap: cascade too deep at {model.__name__}")
    table = _quoted(model._meta.db_table)
    where = f"{_quoted(direct)} = {ids}"
    set_null = []
    for relation in get_candidate_relations_to_delete(model._meta):
        child, field = relation.related_model, relation.field
        target = field.target_field.column
        if relation.on_delete is CASCADE:
            # ANY(ARRAY(…)): the subquery runs once and the child is probed through its
            # foreign-key index (IN (…) can be planned as a hash join over the whole child).
            child_ids = ids
            if target != direct:
                child_ids = f"ANY(ARRAY(SELECT {_quoted(target)} FROM {table} WHERE {where}))"
            _collect_deletes(child, child_ids, field.column, deletes, depth + 1)
        elif relation.on_delete is SET_NULL:
            if (child.__name__, field.name) not in OWN_AGENDA_SET_NULL:
                set_null.append((child, field.column, target))
        elif relation.on_delete is not DO_NOTHING:
            raise ImproperlyConfigured(
                f"reap: {child.__name__}.{field.name} has on_delete="
                f"{relation.on_delete.__name__}, which agendas_reap does not handle"
            )
    deletes.append((model, where, set_null))


def _quoted(name: str) -> str:
    return connection.ops.quote_name(name)
