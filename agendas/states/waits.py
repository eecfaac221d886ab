"""Agendas that wait for other agendas (`after` at submit; docs/design.md §4.2, §5.1, §6.5).

A waiting agenda has one `AgendaWait` (`on` succeeded or completed, how many upstream agendas
remain) and one `AgendaDependency` per upstream. It stays `pending`, with no `run_after` (the
promote never reads it; a submitted `run_after` waits in the wait row), until its last upstream
reaches `on`, and becomes `ready` in that upstream's own transaction: entering a terminal state
runs `waits_release` (registered in `machine.FINISH_HOOKS`). An upstream that fails or is
aborted while `on` is succeeded fails the waiter (aborts it with `on_failure: abort`) with a
message naming it; that is a terminal state too, so the agendas waiting for the waiter move on
in the same loop, never by recursion. Upstreams are agendas of the waiter's own customer, at
most `MAX_WAITERS` wait for one, and one request writes at most `MAX_REQUEST_DEPENDENCIES`
(`AfterResolver`).

Locks: every writer of a wait row holds its waiter's progress row first. The release locks the
waiters' progress rows in pk order, then reads their waits, so concurrent finishers of one
waiter's upstreams take turns and exactly one of them sees the count reach 0; ending a wait
(the waiter aborted, failed) happens under the waiter's lock too and touches no dependency
row, so it never waits for a releaser that waits for it. A submit locks its upstreams' progress
rows (pk order) and marks them `has_waiters` while it reads their states and writes the
dependencies: an upstream cannot finish unseen in between, and an upstream that was never
marked finishes without a statement here.
"""

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Case, Count, Q, TextField, Value, When

from agendas.models import (
    Agenda,
    AgendaDependency,
    AgendaProgress,
    AgendaWait,
    OperationProgress,
)
from agendas.states.bulk import progresses_enter_ready, progresses_leave_waiting
from agendas.states.machine import (
    FINISH_HOOKS,
    TERMINAL,
    S,
    _new_operations,
    _new_progress,
    progress_create,
    progress_create_many,
)
from resourcepools.models import Customer

On = AgendaWait.On
OnFailure = AgendaWait.OnFailure
# Bounds of what a submitter may ask to wait for.
MAX_UPSTREAMS = 1000
MAX_LINK_IDS = 100
# Dependencies one request may write: one submit, or the items of a bulk submit together.
MAX_REQUEST_DEPENDENCIES = 1000
# Agendas that may wait at once for one agenda: its release moves them all in its own
# transaction. A waiter that ended (aborted) counts until that agenda ends too.
MAX_WAITERS = 100
# Ids named in messages and in the waiting reason's detail.
LISTED = 20
AFTER_FIELDS = ("agendas", "link_ids", "on", "on_failure")


@dataclass(frozen=True)
class After:
    """A checked `after`: the upstream agendas (the submitting customer's) and what to wait
    for."""

    upstream_ids: tuple[uuid.UUID, ...]
    on: str = On.SUCCEEDED
    on_failure: str = OnFailure.FAIL


@dataclass(frozen=True)
class AfterAsked:
    """An `after` of the right shape, not yet resolved to agendas."""

    ids: tuple[uuid.UUID, ...]
    link_ids: tuple[str, ...]
    on: str
    on_failure: str


def waiting_message(remaining: int) -> str:
    return f"waiting for {remaining} agenda{'' if remaining == 1 else 's'}"


def _listed(values: Sequence[object]) -> str:
    shown = ", ".join(str(value) for value in values[:LISTED])
    return shown + (f" and {len(values) - LISTED} more" if len(values) > LISTED else "")


# --- Submit: check, resolve, write ---------------------------------------------------------


def after_resolve(*, customer: Customer, after: Mapping[str, Any] | None) -> After | None:
    """Check one submit's `after` and resolve it to upstream agenda ids, or raise a
    ValidationError naming `after.<field>` (`AfterResolver` for the rules)."""
    asked = after_check(after)
    if asked is None:
        return None
    resolved = AfterResolver([(customer, asked)]).resolve(customer, asked)
    AfterResolver.check([resolved])
    return resolved


def after_check(after: Mapping[str, Any] | None) -> AfterAsked | None:
    """The shape of `after`, read without a query, or a ValidationError naming the field."""
    if after is None:
        return None
    if not isinstance(after, Mapping):
        raise ValidationError({"after": ["An object is required."]})
    unknown = sorted(str(key) for key in after if key not in AFTER_FIELDS)
    if unknown:
        raise ValidationError({"after": [f"Unknown fields: {', '.join(unknown)}."]})
    on = after.get("on") or On.SUCCEEDED
    if on not in On.values:
        raise ValidationError({"after.on": [f"Must be one of {', '.join(On.values)}."]})
    on_failure = after.get("on_failure") or OnFailure.FAIL
    if on_failure not in OnFailure.values:
        raise ValidationError(
            {"after.on_failure": [f"Must be one of {', '.join(OnFailure.values)}."]}
        )
    ids, link_ids = _uuids(after.get("agendas")), _link_ids(after.get("link_ids"))
    if not ids and not link_ids:
        raise ValidationError(
            {"after": ["Name at least one agenda to wait for, in agendas or link_ids."]}
        )
    return AfterAsked(ids=ids, link_ids=link_ids, on=on, on_failure=on_failure)


def _uuids(values: Any) -> tuple[uuid.UUID, ...]:
    if values is None:
        return ()
    if not isinstance(values, list | tuple) or len(values) > MAX_UPSTREAMS:
        raise ValidationError(
            {"after.agendas": [f"A list of at most {MAX_UPSTREAMS} agenda ids is required."]}
        )
    ids = []
    for value in values:
        try:
            ids.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise ValidationError({"after.agendas": [f"Not an agenda id: {value!r}."]}) from None
    return tuple(dict.fromkeys(ids))


def _link_ids(values: Any) -> tuple[str, ...]:
    if values is None:
        return ()
    if not isinstance(values, list | tuple) or len(values) > MAX_LINK_IDS:
        raise ValidationError(
            {"after.link_ids": [f"A list of at most {MAX_LINK_IDS} link ids is required."]}
        )
    if not all(isinstance(value, str) and 0 < len(value) <= 255 for value in values):
        raise ValidationError(
            {"after.link_ids": ["Each link id is a text of 1 to 255 characters."]}
        )
    return tuple(dict.fromkeys(values))


def _too_many(field: str, count: str) -> ValidationError:
    return ValidationError(
        {
            field: [
                f"This request would wait for {count} agendas in all (every item's after "
                f"counts); one request may wait for at most {MAX_REQUEST_DEPENDENCIES}."
            ]
        }
    )


class AfterResolver:
    """Resolves the `after`s of one request (one submit, or the items of a bulk submit) with one
    query for all their agenda ids and one for all their link ids, whatever the number of
    items. An agenda waits only for agendas of its own customer: another customer's id is
    answered exactly like a missing one, and link ids name the customer's agendas with them.
    The request may name at most `MAX_REQUEST_DEPENDENCIES` agendas in all; `check` then
    bounds the waiters of each upstream with one more query. Any of these request-wide bounds
    refuses the whole request; a missing id or link id refuses only its item."""

    def __init__(self, asked: Sequence[tuple[Customer, AfterAsked]]) -> None:
        # A lower bound of the dependencies asked: each id is one, each link id at least one.
        named = sum(max(len(after.ids), len(after.link_ids)) for _, after in asked)
        if named > MAX_REQUEST_DEPENDENCIES:
            raise _too_many("after", f"at least {named}")
        ids = {agenda_id for _, after in asked for agenda_id in after.ids}
        self._owner = dict(
            Agenda.objects.filter(pk__in=ids).values_list("pk", "customer_id") if ids else ()
        )
        links: dict[object, set[str]] = {}
        for customer, after in asked:
            links.setdefault(customer.pk, set()).update(after.link_ids)
        wanted = Q()
        for customer_id, link_ids in links.items():
            if link_ids:
                wanted |= Q(customer_id=customer_id, link_id__in=sorted(link_ids))
        rows = list(
            Agenda.objects.filter(wanted)
            .order_by()
            .values_list("pk", "customer_id", "link_id")[: MAX_REQUEST_DEPENDENCIES + 1]
            if wanted
            else ()
        )
        if len(rows) > MAX_REQUEST_DEPENDENCIES:
            # Each row is some item's: the request names more agendas than it may wait for.
            raise _too_many("after.link_ids", f"more than {MAX_REQUEST_DEPENDENCIES}")
        self._linked: dict[tuple[object, str], list[uuid.UUID]] = {}
        for agenda_id, customer_id, link_id in rows:
            self._linked.setdefault((customer_id, link_id), []).append(agenda_id)

    def resolve(self, customer: Customer, asked: AfterAsked) -> After:
        """The item's upstream agendas, or a ValidationError naming the ids or link ids that
        name none of the customer's agendas."""
        missing = [i for i in asked.ids if self._owner.get(i) != customer.pk]
        if missing:
            # A foreign id is answered exactly like a missing one: nothing tells them apart.
            raise ValidationError(
                {
                    "after.agendas": [
                        f"Customer {customer.slug} has no agenda with id {_listed(missing)}."
                    ]
                }
            )
        unmatched = [i for i in asked.link_ids if (customer.pk, i) not in self._linked]
        if unmatched:
            raise ValidationError(
                {
                    "after.link_ids": [
                        f"Customer {customer.slug} has no agenda with link id {_listed(unmatched)}."
                    ]
                }
            )
        linked = [a for link_id in asked.link_ids for a in self._linked[customer.pk, link_id]]
        upstream_ids = tuple(dict.fromkeys([*asked.ids, *linked]))
        if len(upstream_ids) > MAX_UPSTREAMS:
            raise ValidationError(
                {
                    "after": [
                        f"Wait for at most {MAX_UPSTREAMS} agendas; these are {len(upstream_ids)}."
                    ]
                }
            )
        return After(upstream_ids=upstream_ids, on=asked.on, on_failure=asked.on_failure)

    @staticmethod
    def check(afters: Iterable[After]) -> None:
        """The request-wide bounds of the resolved `after`s about to be written: at most
        `MAX_REQUEST_DEPENDENCIES` dependencies, and at most `MAX_WAITERS` open waiters per
        upstream, counting those already there (one grouped count). Checked before the write;
        concurrent submits for one upstream may together pass `MAX_WAITERS` by their own
        few."""
        asked = Counter(upstream for after in afters for upstream in after.upstream_ids)
        total = sum(asked.values())
        if total > MAX_REQUEST_DEPENDENCIES:
            raise _too_many("after", str(total))
        if not asked:
            return
        waiting = dict(
            AgendaDependency.objects.filter(upstream_id__in=list(asked), finished_at__isnull=True)
            .order_by()
            .values("upstream_id")
            .annotate(count=Count("pk"))
            .values_list("upstream_id", "count")
        )
        over = sorted(str(u) for u, n in asked.items() if waiting.get(u, 0) + n > MAX_WAITERS)
        if over:
            raise ValidationError(
                {
                    "after.agendas": [
                        f"At most {MAX_WAITERS} agendas may wait for one agenda at a time (an "
                        f"aborted waiter counts until that agenda ends); agenda {_listed(over)} "
                        "would have more."
                    ]
                }
            )


@dataclass(frozen=True)
class _Start:
    remaining: int
    # (terminal state, message) when an upstream already ended otherwise than `on` asks.
    failure: tuple[str, str] | None

    @property
    def holds(self) -> bool:
        return self.remaining > 0 or self.failure is not None


def progresses_create_after(
    entries: Sequence[tuple[Agenda, datetime | None, bool]],
    afters: Mapping[object, After],
    *,
    now: datetime,
) -> list[AgendaProgress]:
    """`progress_create_many` for new (inserted) agendas of which some wait for others (`afters`
    by agenda id): their waits and dependencies are written, upstreams already in `on` count at
    once; an agenda with upstreams left starts `pending` ("waiting for N agendas"), one whose
    upstream already failed (or was aborted) while `on` is succeeded starts failed (aborted,
    `on_failure: abort`), the others start as a plain submit does. Each progress is cached on
    its agenda; returned in entry order."""
    starts = _waits_create(
        [
            (agenda, afters[agenda.pk], run_after)
            for agenda, run_after, _ in entries
            if agenda.pk in afters
        ],
        now=now,
    )
    free = [
        entry for entry in entries if entry[0].pk not in starts or not starts[entry[0].pk].holds
    ]
    if len(free) == 1 and len(entries) == 1:
        agenda, run_after, do_not_run = free[0]
        agenda.progress = progress_create(
            agenda=agenda, run_after=run_after, do_not_run=do_not_run, now=now
        )
    elif free:
        progress_create_many(free, now=now)
    held = []
    for agenda, _, do_not_run in entries:
        start = starts.get(agenda.pk)
        if start is None or not start.holds:
            continue
        progress = _new_progress(agenda, run_after=None, do_not_run=do_not_run, now=now)
        progress.state = S.PENDING
        if not do_not_run:
            progress.message = waiting_message(start.remaining)
        agenda.progress = progress
        held.append(progress)
    AgendaProgress.objects.bulk_create(held)
    OperationProgress.objects.bulk_create(
        operation for progress in held for operation in _new_operations(progress, progress.agenda)
    )
    failures = {p.agenda_id: starts[p.agenda_id].failure for p in held}
    for target in (S.FAILED, S.ABORTED):
        failing = {
            agenda_id: failure[1]
            for agenda_id, failure in failures.items()
            if failure is not None and failure[0] == target
        }
        progresses_leave_waiting(
            [progress for progress in held if progress.agenda_id in failing],
            target,
            message="",
            messages=failing,
            now=now,
            release=False,  # brand new: nothing waits for them yet
        )
    return [agenda.progress for agenda, _, _ in entries]


def _waits_create(
    entries: list[tuple[Agenda, After, datetime | None]], *, now: datetime
) -> dict[object, _Start]:
    """Lock the upstreams' progress rows FOR SHARE, read their states and write each agenda's
    wait and dependencies; return how each agenda starts."""
    if not entries:
        return {}
    found = _states_locked(sorted({u for _, after, _ in entries for u in after.upstream_ids}))
    waits, dependencies, starts = [], [], {}
    for agenda, after, run_after in entries:
        remaining, failure, total = 0, None, 0
        for upstream in after.upstream_ids:
            state = found.get(upstream)
            if state is None or state in TERMINAL:
                if failure is None and after.on == On.SUCCEEDED and state != S.SUCCEEDED:
                    failure = _failure(after.on_failure, upstream, state)
            else:
                remaining += 1
            if state is not None:  # None: reaped since the check (it had finished)
                total += 1
                finished = None if state not in TERMINAL else now
                dependencies.append(
                    AgendaDependency(waiter=agenda, upstream_id=upstream, finished_at=finished)
                )
        start = _Start(remaining=remaining, failure=failure)
        waits.append(
            AgendaWait(
                agenda=agenda,
                on=after.on,
                on_failure=after.on_failure,
                total=total,
                remaining=remaining,
                run_after=run_after if start.holds else None,
                ended_at=None if remaining and failure is None else now,
            )
        )
        starts[agenda.pk] = start
    AgendaWait.objects.bulk_create(waits)
    AgendaDependency.objects.bulk_create(dependencies, batch_size=1000)
    return starts


def _states_locked(agenda_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Lock the upstreams' progress rows (pk order), mark them `has_waiters` and return their
    states: a finishing upstream (which locks its row first) either finished before this submit
    read it, or waits for this submit to commit and then sees the mark and the dependencies."""
    rows = AgendaProgress.objects.filter(agenda_id__in=agenda_ids)
    if connection.vendor != "postgresql":  # SQLite serialises writers: no lock needed
        rows.update(has_waiters=True)
        return dict(rows.values_list("agenda_id", "state"))
    table = connection.ops.quote_name(AgendaProgress._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH locked AS (SELECT id FROM {table} WHERE agenda_id = ANY(%s::uuid[]) "
            f"ORDER BY id FOR UPDATE) UPDATE {table} p SET has_waiters = true FROM locked "
            "WHERE p.id = locked.id RETURNING p.agenda_id, p.state",
            [[str(agenda_id) for agenda_id in agenda_ids]],
        )
        return dict(cursor.fetchall())


def _failure(on_failure: str, upstream: object, state: str | None) -> tuple[str, str]:
    target = S.ABORTED if on_failure == OnFailure.ABORT else S.FAILED
    ended = "no longer exists" if state is None else f"ended {state}"
    return target, f"{target}: agenda {upstream} it waited for {ended}, not succeeded"


# --- The release ---------------------------------------------------------------------------


def waits_release(
    progresses: list[AgendaProgress], state: str, waiting: bool, now: datetime
) -> None:
    """Agendas entered the terminal `state` (their locked progress rows): end their own open
    waits when they left a waiting state, then move on the agendas waiting for them, and down
    the chain of waiters. Free when nothing ever waited for them (no `has_waiters` mark): the
    common finish sends no statement."""
    work = [(list(progresses), state, waiting)]
    while work:
        progresses, state, waiting = work.pop()
        if waiting:
            AgendaWait.objects.filter(
                agenda_id__in=[progress.agenda_id for progress in progresses],
                ended_at__isnull=True,
            ).update(ended_at=now)
        upstreams = [progress.agenda_id for progress in progresses if progress.has_waiters]
        finished = _dependencies_finish(upstreams, now=now) if upstreams else []
        if finished:
            work.extend(_waiters_move(finished, state, now=now))


FINISH_HOOKS.append(waits_release)


def _dependencies_finish(ids: list[object], *, now: datetime) -> list[tuple[object, object]]:
    """Mark the open dependencies on these upstreams finished; return (waiter, upstream)."""
    open_rows = AgendaDependency.objects.filter(upstream_id__in=ids, finished_at__isnull=True)
    if connection.vendor != "postgresql":
        rows = list(open_rows.values_list("waiter_id", "upstream_id"))
        open_rows.update(finished_at=now)
        return rows
    table = connection.ops.quote_name(AgendaDependency._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET finished_at = %s WHERE upstream_id = ANY(%s::uuid[]) "
            "AND finished_at IS NULL RETURNING waiter_id, upstream_id",
            [now, [str(agenda_id) for agenda_id in ids]],
        )
        return cursor.fetchall()


def _waiters_move(
    finished: list[tuple[object, object]], state: str, *, now: datetime
) -> list[tuple[list[AgendaProgress], str, bool]]:
    """Count the finished upstreams against their waiters' open waits (waiters' progress rows
    locked first, in pk order) and move the waiters: ready when none is left, failed or aborted
    when `on` is succeeded and `state` is not. Returns the failed and aborted ones, whose own
    waiters move next."""
    counts = Counter(waiter for waiter, _ in finished)
    cause = {waiter: upstream for waiter, upstream in finished}
    progresses = list(
        AgendaProgress.objects.select_for_update(of=("self",))
        .select_related("agenda", "agenda__customer")
        .filter(agenda_id__in=list(counts))
        .order_by("pk")
    )
    waits = {
        wait.agenda_id: wait
        for wait in AgendaWait.objects.filter(agenda_id__in=list(counts), ended_at__isnull=True)
    }
    changed, released, still, failing = [], [], {}, {S.FAILED: [], S.ABORTED: []}
    for progress in progresses:
        wait = waits.get(progress.agenda_id)
        if wait is None:  # ended already: released, failed, or the waiter itself ended
            continue
        changed.append(wait)
        if wait.on == On.SUCCEEDED and state != S.SUCCEEDED:
            wait.ended_at = now
            target, message = _failure(wait.on_failure, cause[progress.agenda_id], state)
            failing[target].append((progress, message))
            continue
        wait.remaining = max(0, wait.remaining - counts[progress.agenda_id])
        if wait.remaining:
            still[progress.agenda_id] = waiting_message(wait.remaining)
        else:
            wait.ended_at = now
            released.append((progress, wait))
    AgendaWait.objects.bulk_update(changed, ["remaining", "ended_at"])
    _messages_set(still, now=now)
    _waiters_release(released, now=now)
    cascade = []
    for target, moving in failing.items():
        progresses_leave_waiting(
            [progress for progress, _ in moving],
            target,
            message="",
            messages={progress.agenda_id: message for progress, message in moving},
            now=now,
            release=False,  # their own waiters move next, in the caller's loop
        )
        if moving:
            cascade.append(([progress for progress, _ in moving], target, True))
    return cascade


def _messages_set(messages: Mapping[object, str], *, now: datetime) -> None:
    """The progress message of pending agendas still waiting: how many agendas are left."""
    if not messages:
        return
    AgendaProgress.objects.filter(
        agenda_id__in=list(messages), state=S.PENDING, do_not_run=False
    ).update(
        message=Case(
            *(When(agenda_id=agenda_id, then=Value(text)) for agenda_id, text in messages.items()),
            output_field=TextField(),
        ),
        updated_at=now,
    )


def _waiters_release(released: list[tuple[AgendaProgress, AgendaWait]], *, now: datetime) -> None:
    """Waiters whose last upstream finished: a pending one becomes ready (or waits on for its
    submitted `run_after`, then the promote takes it); a paused one stays paused and resumes to
    ready; a held one (do_not_run) stays held."""
    ready, later = [], []
    for progress, wait in released:
        if progress.state != S.PENDING or progress.do_not_run:
            continue
        if wait.run_after is not None and wait.run_after > now:
            progress.run_after, progress.message, progress.updated_at = (
                wait.run_after,
                "waiting for run_after",
                now,
            )
            later.append(progress)
            continue
        agenda = progress.agenda
        ready.append(
            (progress.pk, agenda.pk, agenda.customer_id, agenda.insight_id, agenda.priority)
        )
    AgendaProgress.objects.bulk_update(later, ["run_after", "message", "updated_at"])
    progresses_enter_ready(ready, now=now, message="ready: the agendas it waited for finished")
