"""A pull whose claim comes up short fills the queue inline (scheduling/pull.py,
docs/design.md §6.3): a short `queue_size` keeps a fill's fairness without bounding what
pullers take, and the inline fill keeps every promise of a fill (order, caps, exactly once)."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from agendas.models import AgendaProgress
from resourcepools.models import Insight
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling.locks import FILL_LOCK_WAITERS_SQL, fill_lock_key
from scheduling.models import QueuedAgenda, ReadyAgenda
from tests.threads import all_at_once

pytestmark = pytest.mark.django_db


def _short_queue(insight, size: int = 2, algorithm=Insight.Algorithm.ROUND_ROBIN) -> None:
    insight.queue_size = size
    insight.scheduling_algorithm = algorithm
    insight.save()


def _short_queue_with_ready(insight, submit_agenda, submitter, ready: int, size: int = 5) -> None:
    """A short queue, and `ready` agendas of `submitter` behind it (the submits' nudges are off
    in tests: nothing is queued yet)."""
    _short_queue(insight, size=size)
    for _ in range(ready):
        submit_agenda(submitter)


def test_a_pull_of_ten_from_a_queue_of_two_takes_ten_in_round_robin_order(
    submitter, other_submitter, submit_agenda, insight, pull
):
    _short_queue(insight)
    mine = [submit_agenda(submitter) for _ in range(6)]
    theirs = [submit_agenda(other_submitter) for _ in range(6)]

    pulled = pull(insight, count=10)

    slugs = [item.agenda.customer.slug for item in pulled]
    assert len(pulled) == 10
    # Round robin across the two customers: one fill of the queue's two and the pull's ten.
    assert slugs.count("acme") == slugs.count(theirs[0].customer.slug) == 5
    assert {item.agenda.pk for item in pulled} <= {a.pk for a in mine + theirs}
    # The queue is left full for the next pull, not drained: one of each customer.
    assert ReadyAgenda.objects.count() == 0
    queued = QueuedAgenda.objects.values_list("customer__slug", flat=True)
    assert sorted(queued) == sorted(["acme", theirs[0].customer.slug])


def test_a_pull_that_fills_inline_fills_once_and_leaves_the_queue_full(
    submitter, submit_agenda, insight, pull
):
    _short_queue(insight, size=10)
    for _ in range(40):
        submit_agenda(submitter)
    pull(insight, count=10)  # the first fill (the submits' nudges are off in tests)
    assert QueuedAgenda.objects.count() == 10

    assert len(pull(insight, count=10)) == 10  # from the full queue: no fill
    assert QueuedAgenda.objects.count() == 0
    with CaptureQueriesContext(connection) as captured:
        assert len(pull(insight, count=10)) == 10  # drained: one fill of 10 + 10, then a claim

    fills = [q for q in captured.captured_queries if q["sql"].startswith("SELECT pg_try_advisory")]
    assert len(fills) == (1 if connection.vendor == "postgresql" else 0)
    assert QueuedAgenda.objects.count() == 10  # the next pull finds a full queue


def test_an_inline_fill_keeps_the_customers_cap(customer, submitter, submit_agenda, insight, pull):
    _short_queue(insight)
    customer.max_executing = 3
    customer.save()
    for _ in range(8):
        submit_agenda(submitter)

    pulled = pull(insight, count=10)

    assert len(pulled) == 3
    states = AgendaProgress.objects.values_list("state", flat=True)
    assert sorted(states) == ["executing"] * 3 + ["ready"] * 5


def test_a_pull_with_nothing_ready_runs_no_fill(insight):
    _short_queue(insight)

    with CaptureQueriesContext(connection) as captured:
        assert pull_service.insight_pull_once(insight=insight, worker="w1", count=10) == []

    # The claim statement alone (it reads whether anything is ready): no fill is tried.
    statements = [
        query["sql"]
        for query in captured.captured_queries
        if not query["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))
    ]
    assert len(statements) == (1 if connection.vendor == "postgresql" else 3), statements


def test_a_paused_insight_is_not_filled_inline(submitter, submit_agenda, insight, pull):
    _short_queue(insight)
    agenda = submit_agenda(submitter)
    insight.paused = True
    insight.save()

    with CaptureQueriesContext(connection) as captured:
        assert pull(insight, count=5) == []

    assert AgendaProgress.objects.get(agenda=agenda).state == "ready"
    # The claim took nothing because the insight is paused: no fill is tried for it.
    assert not [q for q in captured.captured_queries if "advisory" in q["sql"]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="rival pullers need row locks")
def test_rival_pullers_filling_inline_lease_every_agenda_exactly_once(
    submitter, other_submitter, submit_agenda, insight, worker
):
    _short_queue(insight, size=3)
    submitted = {submit_agenda(p).pk for p in [submitter, other_submitter] for _ in range(20)}

    def pull_until_dry():
        taken = []
        for _ in range(200):  # a fill skipped for a rival's leaves work: pull until none is left
            if not (ReadyAgenda.objects.exists() or QueuedAgenda.objects.exists()):
                break
            pulled = pull_service.insight_pull(
                principal=worker.user, insight=Insight.objects.get(pk=insight.pk), count=4
            )
            taken += [item.agenda.pk for item in pulled]
        return taken

    taken = [pk for run in all_at_once(4, pull_until_dry) for pk in run]

    assert len(taken) == len(set(taken)) == 40
    assert set(taken) == submitted
    assert AgendaProgress.objects.filter(state="executing").count() == 40


def _rival_holding_the_fill_lock(insight, hold: float):
    """A rival fill of `insight` that keeps its lock `hold` seconds once it has filled; returns
    the future of the agendas it moved."""
    filled = threading.Event()

    def rival_fill():
        try:
            with transaction.atomic():
                moved = fill_service.insight_fill(insight_id=insight.pk).moved
                filled.set()
                time.sleep(hold)
            return moved
        finally:
            connection.close()

    future = ThreadPoolExecutor(1).submit(rival_fill)
    assert filled.wait(10)
    return future


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the fill lock is PostgreSQL's")
def test_a_pull_that_meets_a_rivals_fill_waits_for_it_and_takes_its_agendas(
    submitter, submit_agenda, insight
):
    _short_queue_with_ready(insight, submit_agenda, submitter, ready=20)
    hold = 0.5
    rival = _rival_holding_the_fill_lock(insight, hold=hold)
    started = time.monotonic()
    pulled = pull_service.insight_pull_once(
        insight=Insight.objects.get(pk=insight.pk), worker="w1", count=10
    )
    waited = time.monotonic() - started

    assert rival.result(10) == 5
    # Its claim found the queue empty and the rival holding the fill lock: it waited for that
    # fill to commit (instead of coming back empty), took its 5 and filled the rest itself.
    assert waited >= hold * 0.8
    assert len(pulled) == 10
    assert len({item.agenda.pk for item in pulled}) == 10
    assert AgendaProgress.objects.filter(state="executing").count() == 10


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="rival claims need row locks")
def test_a_pull_whose_queue_rivals_are_claiming_fills_for_itself_instead_of_coming_back_empty(
    submitter, submit_agenda, insight
):
    _short_queue(insight, size=10)
    for _ in range(30):
        submit_agenda(submitter)
    assert fill_service.insight_fill(insight_id=insight.pk).moved == 10
    held, release = threading.Event(), threading.Event()

    def rival_claiming_the_queue():
        try:
            with transaction.atomic():  # as a rival's claim does, until it commits
                rows = list(QueuedAgenda.objects.select_for_update().values_list("agenda_id"))
                held.set()
                release.wait(10)
            return {agenda_id for (agenda_id,) in rows}
        finally:
            connection.close()

    rival = ThreadPoolExecutor(1).submit(rival_claiming_the_queue)
    assert held.wait(10)
    try:
        pulled = pull_service.insight_pull_once(
            insight=Insight.objects.get(pk=insight.pk), worker="w1", count=10
        )
    finally:
        release.set()
    locked = rival.result(10)

    # Its claim skipped the 10 queued rows the rival held: not "queue full, nothing to do",
    # but a claim short of its count while work is ready. It filled 10 more and took those.
    assert len(locked) == 10
    assert len(pulled) == 10
    assert not {item.agenda.pk for item in pulled} & locked
    assert AgendaProgress.objects.filter(state="executing").count() == 10
    assert QueuedAgenda.objects.count() == 10  # the rival's rows, still queued
    assert ReadyAgenda.objects.count() == 10


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the fill lock is PostgreSQL's")
def test_a_pull_waits_for_a_rivals_fill_no_longer_than_its_limit_and_loses_nothing(
    submitter, submit_agenda, insight, monkeypatch
):
    _short_queue_with_ready(insight, submit_agenda, submitter, ready=20)
    monkeypatch.setattr(pull_service, "FILL_LOCK_WAIT_SECONDS", 0.2)
    rival = _rival_holding_the_fill_lock(insight, hold=2.0)

    started = time.monotonic()
    pulled = pull_service.insight_pull_once(
        insight=Insight.objects.get(pk=insight.pk), worker="w1", count=10
    )
    waited = time.monotonic() - started

    assert pulled == []
    assert 0.15 <= waited < 1.5
    assert rival.result(10) == 5
    # The timed-out wait aborted only its own transaction: the connection works, nothing was
    # leased, and the rival's fill stands.
    assert AgendaProgress.objects.filter(state="executing").count() == 0
    assert QueuedAgenda.objects.count() == 5
    assert ReadyAgenda.objects.count() == 15


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the fill lock is PostgreSQL's")
def test_a_pull_inside_a_request_ids_turn_does_not_wait_for_a_rivals_fill(
    submitter, submit_agenda, insight
):
    _short_queue_with_ready(insight, submit_agenda, submitter, ready=20)
    rival = _rival_holding_the_fill_lock(insight, hold=1.0)

    started = time.monotonic()
    pulled = pull_service.insight_pull_once(
        insight=Insight.objects.get(pk=insight.pk), worker="w1", count=10, pull_request="u:r1"
    )
    waited = time.monotonic() - started

    # Its turn's transaction would hold its first claim's rows through the wait: it returns
    # at once instead, and its caller polls again.
    assert pulled == []
    assert waited < 0.5
    assert rival.result(10) == 5
    assert AgendaProgress.objects.filter(state="executing").count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the fill lock is PostgreSQL's")
def test_a_pull_that_fills_while_another_waits_for_the_lock_fills_for_both(
    submitter, submit_agenda, insight, monkeypatch
):
    _short_queue_with_ready(insight, submit_agenda, submitter, ready=40)
    fills = []
    real_fill = pull_service.insight_fill

    def counted_fill(**kwargs):
        result = real_fill(**kwargs)
        fills.append(result.moved)
        return result

    monkeypatch.setattr(pull_service, "insight_fill", counted_fill)
    rival = _rival_holding_the_fill_lock(insight, hold=0.7)  # under the pulls' 1 s wait

    def pull_ten():
        try:
            return pull_service.insight_pull_once(
                insight=Insight.objects.get(pk=insight.pk), worker="w", count=10
            )
        finally:
            connection.close()

    pullers = [ThreadPoolExecutor(1).submit(pull_ten) for _ in range(2)]
    for _ in range(100):  # both pulls queue behind the rival's fill
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {FILL_LOCK_WAITERS_SQL}", fill_lock_key(insight.pk))
            if cursor.fetchone()[0] == 2:
                break
        time.sleep(0.01)
    else:
        pytest.fail("the two pulls did not wait for the fill lock")
    pulled = [future.result(10) for future in pullers]

    assert rival.result(10) == 5
    # The first pull through took the rival's 5 and filled its own 5, the queue's 5 and 10 for
    # the pull still waiting, which then claimed those without a fill of its own.
    assert sorted(len(items) for items in pulled) == [10, 10]
    assert len({item.agenda.pk for items in pulled for item in items}) == 20
    assert fills == [20]
    assert AgendaProgress.objects.filter(state="executing").count() == 20
    assert QueuedAgenda.objects.count() == 5
    assert ReadyAgenda.objects.count() == 15
