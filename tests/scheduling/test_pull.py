"""Pull (docs/design.md §6.3): leases, the response shape, who may pull, bad input, long-polling."""

import threading
import time
from datetime import timedelta

import pytest
import time_machine
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas.models import Execution
from agendas.services import agenda_abort, agenda_pause
from resourcepools.models import Membership
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling.models import QueuedAgenda
from tests.scheduling.conftest import state_of

pytestmark = pytest.mark.django_db
Role = Membership.Role


def _pull_url(insight) -> str:
    return f"/api/v1/insights/{insight.pk}/pull/"


def test_pull_leases_queued_agendas_in_queue_order_with_documented_shape(
    submitter, submit_agenda, insight, fill, worker, api_client_for
):
    first, second = submit_agenda(submitter, link_id="L"), submit_agenda(submitter)
    fill(insight)

    with time_machine.travel(timezone.now(), tick=False):
        response = api_client_for(worker).post(
            _pull_url(insight), {"count": 5, "worker": "pod-1"}, format="json"
        )
        now = timezone.now()

    assert response.status_code == 200
    items = response.json()["agendas"]
    assert [item["agenda"]["id"] for item in items] == [str(first.pk), str(second.pk)]
    item = items[0]
    assert item["agenda"]["link_id"] == "L"
    assert item["agenda"]["operations"] == first.operations
    assert item["progress"]["state"] == "executing"
    assert item["progress"]["attempts_completed"] == 0
    assert [op["name"] for op in item["progress"]["operations"]] == ["probe", "report"]
    assert set(item["progress"]["operations"][0]) >= {
        "name",
        "state",
        "percent_complete",
        "result",
        "params",
        "diagnostics",
    }
    execution = Execution.objects.get(agenda=first)
    assert item["execution"] == {
        "id": str(execution.pk),
        "lease_token": str(execution.lease_token),
        "lease_expires_at": (now + timedelta(seconds=insight.lease_seconds))
        .isoformat()
        .replace("+00:00", "Z"),
        "lease_seconds": insight.lease_seconds,
        "number": 1,
    }
    assert (execution.worker, execution.outcome) == ("pod-1", None)
    assert state_of(first) == "executing"
    assert QueuedAgenda.objects.count() == 0


def test_two_pulls_never_return_the_same_agenda(submitter, submit_agenda, insight, fill, pull):
    for _ in range(5):
        submit_agenda(submitter)
    fill(insight)

    first = {item.agenda.pk for item in pull(insight, count=3)}
    second = {item.agenda.pk for item in pull(insight, count=3)}

    assert len(first) == 3
    assert len(second) == 2
    assert first.isdisjoint(second)


def test_pull_never_returns_paused_or_aborted_agendas(
    submitter, submit_agenda, insight, fill, pull
):
    paused, aborted, kept = (submit_agenda(submitter) for _ in range(3))
    fill(insight)
    agenda_pause(principal=submitter.user, agenda=paused)
    agenda_abort(principal=submitter.user, agenda=aborted)

    assert [item.agenda.pk for item in pull(insight)] == [kept.pk]


def test_pull_claims_with_skip_locked_before_any_write(
    submitter, submit_agenda, insight, fill, pull
):
    if connection.vendor != "postgresql":
        pytest.skip("FOR UPDATE SKIP LOCKED is PostgreSQL's")
    submit_agenda(submitter)
    fill(insight)

    with CaptureQueriesContext(connection) as captured:
        pull(insight)

    statements = [query["sql"] for query in captured.captured_queries]
    claim = next(i for i, sql in enumerate(statements) if "SKIP LOCKED" in sql)
    writes = [
        i
        for i, sql in enumerate(statements)
        if sql.lstrip().startswith(("UPDATE", "DELETE", "INSERT"))
    ]
    # The claim is one statement (its CTE locks before it writes); any other write follows it.
    assert all(claim < i for i in writes)
    assert 'FROM "scheduling_queuedagenda"' in statements[claim]


@pytest.mark.parametrize("count", [0, 101, "many"])
def test_bad_count_is_400_and_changes_nothing(
    count, submitter, submit_agenda, insight, fill, worker, api_client_for
):
    agenda = submit_agenda(submitter)
    fill(insight)

    response = api_client_for(worker).post(_pull_url(insight), {"count": count}, format="json")

    assert response.status_code == 400
    assert "count" in response.json()
    assert state_of(agenda) == "queued"
    assert Execution.objects.count() == 0


def test_wait_seconds_above_20_is_400(insight, worker, api_client_for):
    response = api_client_for(worker).post(_pull_url(insight), {"wait_seconds": 21}, format="json")

    assert response.status_code == 400
    assert "wait_seconds" in response.json()


@pytest.mark.parametrize("role", [Role.SUBMITTER, Role.VIEWER])
def test_pull_by_a_customer_member_who_is_not_a_worker_of_the_owner_is_403(
    role,
    make_principal,
    customer,
    pool_owner,
    submitter,
    submit_agenda,
    insight,
    fill,
    api_client_for,
):
    agenda = submit_agenda(submitter)
    fill(insight)
    callers = (
        make_principal(customer, role, username=f"member-{role}"),
        make_principal(pool_owner, role, username=f"owner-{role}"),
    )
    for principal in callers:
        response = api_client_for(principal).post(_pull_url(insight), {}, format="json")
        assert response.status_code == 403
    assert state_of(agenda) == "queued"
    assert Execution.objects.count() == 0


def test_pull_by_the_owners_admin_or_staff_is_allowed(
    make_principal, pool_owner, staff_user, insight, api_client_for
):
    for caller in (make_principal(pool_owner, Role.ADMIN), staff_user):
        response = api_client_for(caller).post(_pull_url(insight), {}, format="json")
        assert (response.status_code, response.json()) == (200, {"agendas": []})


def test_pull_of_an_invisible_insight_is_404(make_principal, api_client_for, insight):
    from tests.factories import CustomerFactory, InsightFactory, ResourcePoolFactory

    other_pool = ResourcePoolFactory(owner=CustomerFactory(slug="elsewhere"))
    hidden = InsightFactory(resource_pool=other_pool, is_global=False)
    outsider = make_principal(CustomerFactory(slug="outsider"), Role.WORKER)

    response = api_client_for(outsider).post(_pull_url(hidden), {}, format="json")

    assert response.status_code == 404


def test_execution_number_counts_executions_not_attempts(
    submitter, submit_agenda, insight, fill, pull, report
):
    from agendas.services import agenda_rerun

    agenda = submit_agenda(submitter)
    fill(insight)
    [first] = pull(insight)
    report(first, state="succeeded")
    agenda_rerun(principal=submitter.user, agenda=agenda)  # attempts_completed back to 0
    fill(insight)

    [second] = pull(insight)

    assert (first.execution.number, second.execution.number) == (1, 2)
    assert second.progress.attempts_completed == 0


def test_long_poll_returns_empty_after_the_wait(insight, worker):
    started = time.monotonic()

    pulled = pull_service.insight_pull(principal=worker.user, insight=insight, wait_seconds=0.3)

    assert pulled == []
    assert 0.3 <= time.monotonic() - started < 2


def _long_poll_for_work_arriving(submitter, submit_agenda, insight, worker, monkeypatch):
    """Long-poll while another thread submits work 0.4 s in; returns what was pulled, the
    seconds it took and the connection this thread held at each pause (None: none)."""
    held_while_sleeping = []
    real_sleep = time.sleep

    def watching_sleep(seconds):
        held_while_sleeping.append(connection.connection)
        real_sleep(seconds)

    monkeypatch.setattr(pull_service.time, "sleep", watching_sleep)

    def producer():
        real_sleep(0.4)
        try:
            submit_agenda(submitter)
            fill_service.insight_fill(insight_id=insight.pk)
        finally:
            connection.close()

    thread = threading.Thread(target=producer)
    thread.start()
    started = time.monotonic()
    pulled = pull_service.insight_pull(principal=worker.user, insight=insight, wait_seconds=10)
    thread.join()
    return pulled, time.monotonic() - started, held_while_sleeping


@pytest.mark.django_db(transaction=True)
def test_long_poll_returns_work_that_arrives_over_one_session(
    submitter, submit_agenda, insight, worker, monkeypatch
):
    pulled, seconds, held = _long_poll_for_work_arriving(
        submitter, submit_agenda, insight, worker, monkeypatch
    )

    assert len(pulled) == 1
    assert seconds < 3
    assert len(held) >= 2
    # Every check of the wait ran on one session: no reconnect, prepared statements kept.
    assert held[0] is not None and all(raw is held[0] for raw in held)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="Django's pools are PostgreSQL's")
def test_long_poll_with_a_pool_gives_the_connection_back_while_waiting(
    submitter, submit_agenda, insight, worker, monkeypatch
):
    connection.close()
    pooled = {**connection.settings_dict, "CONN_MAX_AGE": 0}
    pooled["OPTIONS"] = {**pooled.get("OPTIONS", {}), "pool": {"min_size": 1, "max_size": 2}}
    monkeypatch.setattr(connections[DEFAULT_DB_ALIAS], "settings_dict", pooled)
    try:
        pulled, seconds, held = _long_poll_for_work_arriving(
            submitter, submit_agenda, insight, worker, monkeypatch
        )
    finally:
        connection.close()
        connection.close_pool()

    assert len(pulled) == 1
    assert seconds < 3
    assert held and not any(held)  # other threads may use the pool's connection meanwhile


def test_a_long_poll_that_ends_empty_gives_its_connection_back(insight, worker):
    pulled = pull_service.insight_pull(principal=worker.user, insight=insight, wait_seconds=0.1)

    assert pulled == []
    assert connection.connection is None or connection.in_atomic_block


def test_a_pull_repeated_with_its_request_id_gets_the_same_executions_not_new_ones(
    submitter, submit_agenda, insight, fill, worker
):
    agendas = [submit_agenda(submitter) for _ in range(4)]
    fill(insight)

    def pull(request_id, principal=worker.user):
        return pull_service.insight_pull(
            principal=principal, insight=insight, worker="w", count=2, request_id=request_id
        )

    first = pull("r-1")
    again = pull("r-1")  # the first answer was lost on the way
    other = pull("r-2")

    assert sorted((i.execution.pk, i.execution.lease_token) for i in again) == sorted(
        (i.execution.pk, i.execution.lease_token) for i in first
    )
    assert {item.agenda.pk for item in other}.isdisjoint({item.agenda.pk for item in first})
    assert Execution.objects.count() == 4
    assert {item.agenda.pk for item in first + other} == {agenda.pk for agenda in agendas}


def test_a_request_id_is_the_pulling_users_own(
    submitter, submit_agenda, insight, fill, worker, pool_owner, make_principal
):
    for _ in range(2):
        submit_agenda(submitter)
    fill(insight)
    colleague = make_principal(pool_owner, role="worker", username="worker-2")

    mine = pull_service.insight_pull(
        principal=worker.user, insight=insight, worker="w", count=1, request_id="same"
    )
    theirs = pull_service.insight_pull(
        principal=colleague.user, insight=insight, worker="w2", count=1, request_id="same"
    )

    assert mine[0].execution.pk != theirs[0].execution.pk


def test_a_request_id_answered_before_leases_nothing_more_once_its_executions_ended(
    submitter, submit_agenda, insight, fill, worker, report
):
    agendas = [submit_agenda(submitter) for _ in range(2)]
    fill(insight)
    (first,) = pull_service.insight_pull(
        principal=worker.user, insight=insight, worker="w", count=1, request_id="r"
    )
    report(first, state="succeeded")
    (waiting,) = [agenda for agenda in agendas if agenda.pk != first.agenda.pk]

    started = time.monotonic()
    again = pull_service.insight_pull(
        principal=worker.user, insight=insight, worker="w", count=1, request_id="r", wait_seconds=10
    )

    assert again == []
    assert time.monotonic() - started < 5  # answered at once, not after the long poll
    assert Execution.objects.count() == 1
    assert state_of(waiting) == "queued"
    assert list(QueuedAgenda.objects.values_list("agenda_id", flat=True)) == [waiting.pk]
