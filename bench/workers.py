"""In-process roles the end-to-end and fairness phases fork: submitter, filler, puller.

Each runs in its own process (forked after Django is set up, with no open connection) and
talks to POP through its services only.
"""

from __future__ import annotations

import multiprocessing
import time

from bench.common import NOOP_OPERATIONS, World, submit_bulk, user

SUCCEEDED_OPERATIONS = [{"name": "noop", "state": "succeeded", "result": {"ok": True}}]


def submitter(world: World, customer_ids: list[str], total: int, seconds: float, out) -> None:
    """Submit `total` agendas in bulk batches of 100, customers in turn, for at most
    `seconds`; put the number submitted on `out`."""
    done, turn = 0, 0
    deadline = time.perf_counter() + seconds
    while done < total and time.perf_counter() < deadline:
        size = min(100, total - done)
        submit_bulk(world, customer_ids[turn % len(customer_ids)], size)
        done += size
        turn += 1
    out.put(("submitted", done))


def filler(world: World, period: float, stop) -> None:
    """The cluster's part, until `stop` is set: the periodic fill of docs/design.md §6.2 every
    `period` seconds, and in between, with POP_FILL_NUDGE=notify, the fills of the nudged
    insights as the ticker does them (scheduling/fill_listener.py)."""
    from django.db import close_old_connections

    from scheduling.fill import insights_fill
    from scheduling.fill_listener import fill_nudged_until

    while not stop.is_set():
        insights_fill()
        close_old_connections()
        next_fill = time.time() + period
        while not stop.is_set() and time.time() < next_fill:
            fill_nudged_until(min(next_fill, time.time() + 0.25))


def puller(world: World, count: int, stop, out, *, wait_seconds: float = 0.5) -> None:
    """Pull `count` at a time and report each pulled agenda succeeded in one batch report,
    until `stop` is set; put (pulled, batch report failures) on `out`. Each runs inside
    `hot_path_statements()`, as the pull and report views run them."""
    from core.prepared_statements import hot_path_statements
    from resourcepools.models import Insight
    from scheduling.pull import insight_pull
    from scheduling.report import execution_report_batch

    name = multiprocessing.current_process().name
    principal = user(world.worker_user_id)
    insight = Insight.objects.select_related("resource_pool").get(pk=world.insight_id)
    pulled_total, failures = 0, 0
    while not stop.is_set():
        with hot_path_statements():
            pulled = insight_pull(
                principal=principal,
                insight=insight,
                worker=name,
                count=count,
                wait_seconds=wait_seconds,
            )
        if not pulled:
            continue
        with hot_path_statements():
            results = execution_report_batch(
                reports=[
                    {
                        "execution": item.execution.pk,
                        "lease_token": str(item.execution.lease_token),
                        "operations": SUCCEEDED_OPERATIONS,
                        "state": "succeeded",
                    }
                    for item in pulled
                ]
            )
        failures += sum(1 for result in results if result.status != 200)
        pulled_total += len(pulled)
    out.put(("pulled", pulled_total, failures))


__all__ = ["NOOP_OPERATIONS", "filler", "puller", "submitter"]
