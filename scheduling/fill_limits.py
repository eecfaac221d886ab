"""What each customer may take in a fill (docs/design.md §6.1): its weight, hold, rate limit
and `max_executing` cap, read for the customers a fill serves, and the caps counted again under
their locks."""

from dataclasses import dataclass

from django.db.models import Count

from agendas.models import Execution
from resourcepools.models import Customer
from scheduling import fairness
from scheduling.locks import customer_cap_locks
from scheduling.models import QueuedAgenda


@dataclass(frozen=True)
class CustomerLimits:
    weight: int
    cap: int | None
    held: bool
    limit: tuple[int, int] | None  # rate limit: (agendas, period seconds)


# A customer's fill limits, in `limits_of`' order, as read from Customer (also beside a lane).
LIMIT_COLUMNS = ("weight", "max_executing", "held", "rate_limit", "rate_period_seconds")


def limits_of(
    weight: int, cap: int | None, held: bool, rate_limit: int | None, period: int
) -> CustomerLimits:
    return CustomerLimits(
        weight=weight,
        cap=cap,
        held=held,
        limit=(rate_limit, period) if rate_limit is not None else None,
    )


def caps_of(customers: dict[object, CustomerLimits]) -> dict[object, int]:
    """The customers' `max_executing` caps, for those that have one."""
    return {pk: c.cap for pk, c in customers.items() if c.cap is not None}


def rate_limits_of(customers: dict[object, CustomerLimits]) -> dict[object, tuple[int, int]]:
    """The customers' rate limits, for those that have one."""
    return {pk: c.limit for pk, c in customers.items() if c.limit is not None}


def customer_limits(customer_ids: set[object]) -> dict[object, CustomerLimits]:
    if not customer_ids:
        return {}
    rows = Customer.objects.filter(pk__in=customer_ids).values_list("pk", *LIMIT_COLUMNS)
    return {pk: limits_of(*limits) for pk, *limits in rows}


def cap_allowance(caps: dict[object, int]) -> dict[object, int]:
    """For customers with `max_executing`, how many more they may have queued or executing."""
    if not caps:
        return {}
    queued = dict(
        QueuedAgenda.objects.filter(customer_id__in=list(caps))
        .values_list("customer_id")
        .annotate(n=Count("pk"))
        .values_list("customer_id", "n")
        .order_by()
    )
    executing = dict(
        Execution.objects.filter(customer_id__in=list(caps), outcome__isnull=True)
        .values_list("customer_id")
        .annotate(n=Count("pk"))
        .values_list("customer_id", "n")
        .order_by()
    )
    return {pk: cap - queued.get(pk, 0) - executing.get(pk, 0) for pk, cap in caps.items()}


def within_caps(
    picks: list[fairness.ReadyCandidate], caps: dict[object, int]
) -> list[fairness.ReadyCandidate]:
    """The picks that keep every capped customer within `max_executing`, counted again under
    the customers' cap locks: a fill of another insight that admitted the same customer's work
    a moment ago has committed by the time the lock is ours, so its rows are counted. Held to
    the end of this fill's transaction (docs/design.md §6.1)."""
    capped = {pick.customer_id for pick in picks if pick.customer_id in caps}
    if not capped:
        return picks
    customer_cap_locks(list(capped))
    return fairness.within_allowance(picks, cap_allowance({pk: caps[pk] for pk in capped}))
