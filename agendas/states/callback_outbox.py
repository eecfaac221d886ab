"""The callback outbox: the `CallbackDelivery` row a state change writes, in the same
transaction, when the agenda or its customer has a callback URL (delivered by
`scheduling.callbacks`: signed, retried).

A final event's body carries the agenda's outputs (`agendas.outputs`); they are read in one
query for however many agendas end together.
"""

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agendas.models import AgendaProgress, OperationProgress
from agendas.outputs import agenda_outputs
from agendas.queue_models import CallbackDelivery

S = AgendaProgress.State
FINAL_EVENTS: frozenset[str] = frozenset({S.SUCCEEDED, S.FAILED, S.ABORTED})


def callback_enqueue(progress: AgendaProgress, *, event: str, now: datetime) -> None:
    """Write the outbox row for `event` when the agenda or its customer has a callback URL."""
    callbacks_enqueue([progress], event=event, now=now)


def callbacks_enqueue(progresses: Sequence[AgendaProgress], *, event: str, now: datetime) -> None:
    """`callback_enqueue` for many agendas reaching the same `event`: at most two statements."""
    wanted = [progress for progress in progresses if _callback_url(progress)]
    if not wanted:
        return
    outputs = _outputs_by_progress(wanted) if event in FINAL_EVENTS else None
    deliveries = [
        _callback_delivery(
            progress,
            event=event,
            now=now,
            outputs=None if outputs is None else outputs.get(progress.pk, []),
        )
        for progress in wanted
    ]
    if len(deliveries) == 1:
        deliveries[0].save(force_insert=True)
    else:
        CallbackDelivery.objects.bulk_create(deliveries)


def _callback_url(progress: AgendaProgress) -> str:
    agenda = progress.agenda
    return agenda.callback_url or agenda.customer.callback_url


def _outputs_by_progress(progresses: Sequence[AgendaProgress]) -> dict[Any, list[dict]]:
    rows = (
        OperationProgress.objects.filter(agenda_progress__in=[p.pk for p in progresses])
        .order_by("agenda_progress_id", "position")
        .only("agenda_progress_id", "name", "result")
    )
    by_progress: dict[Any, list[OperationProgress]] = defaultdict(list)
    for row in rows:
        by_progress[row.agenda_progress_id].append(row)
    return {key: agenda_outputs(operations) for key, operations in by_progress.items()}


def _callback_delivery(
    progress: AgendaProgress, *, event: str, now: datetime, outputs: list[dict] | None
) -> CallbackDelivery:
    agenda = progress.agenda
    body: dict[str, Any] = {
        "event": event,
        "agenda_id": str(agenda.pk),
        "link_id": agenda.link_id,
        "external_id": agenda.external_id,
        "labels": agenda.labels,
        "customer": agenda.customer.slug,
        "state": progress.state,
        "processing_state": progress.processing_state,
        "percent_complete": progress.percent_complete,
        "attempts_completed": progress.attempts_completed,
        "occurred_at": now.isoformat(),
    }
    if outputs is not None:
        body["outputs"] = outputs
    return CallbackDelivery(
        agenda_id=agenda.pk,
        customer_id=agenda.customer_id,
        link_id=agenda.link_id,
        cid=agenda.cid,
        url=_callback_url(progress),
        event=event,
        body=body,
        next_attempt_at=now,
    )
