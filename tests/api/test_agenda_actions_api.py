"""abort, pause, resume and rerun against every state (docs/design.md §4, §7).

States are reached through the services; every refusal is a 409 naming the current state
and changes nothing (progress, operations, queue rows, executions, callbacks).
"""

import pytest

from agendas.models import AgendaProgress
from core.principals import SYSTEM
from scheduling.fill import insight_fill
from scheduling.models import CallbackDelivery, ReadyAgenda
from scheduling.pull import insight_pull
from scheduling.report import execution_report

pytestmark = pytest.mark.django_db

# state → (HTTP status, state afterwards); executing abort/pause only raise a flag.
ABORT = {
    "pending_held": (200, "aborted"),
    "pending_later": (200, "aborted"),
    "ready": (200, "aborted"),
    "queued": (200, "aborted"),
    "executing": (200, "executing"),
    "paused": (200, "aborted"),
    "succeeded": (409, "succeeded"),
    "failed": (409, "failed"),
    "aborted": (409, "aborted"),
}
PAUSE = {
    "pending_held": (200, "paused"),
    "pending_later": (200, "paused"),
    "ready": (200, "paused"),
    "queued": (200, "paused"),
    "executing": (200, "executing"),
    "paused": (409, "paused"),
    "succeeded": (409, "succeeded"),
    "failed": (409, "failed"),
    "aborted": (409, "aborted"),
}
RESUME = {
    "pending_held": (409, "pending"),
    "pending_later": (409, "pending"),
    "ready": (409, "ready"),
    "queued": (409, "queued"),
    "executing": (409, "executing"),
    "paused": (200, "ready"),
    "succeeded": (409, "succeeded"),
    "failed": (409, "failed"),
    "aborted": (409, "aborted"),
}
RERUN = {
    "pending_held": (200, "ready"),
    "pending_later": (409, "pending"),
    "ready": (409, "ready"),
    "queued": (409, "queued"),
    "executing": (409, "executing"),
    "paused": (200, "ready"),
    "succeeded": (200, "ready"),
    "failed": (200, "ready"),
    "aborted": (200, "ready"),
}
CASES = [
    (action, state, *outcome)
    for action, table in (("abort", ABORT), ("pause", PAUSE), ("resume", RESUME), ("rerun", RERUN))
    for state, outcome in table.items()
]


@pytest.mark.parametrize(("action", "state", "status", "after"), CASES)
def test_agenda_action_in_each_state(
    client, submitter, agenda_in_state, snapshot, action, state, status, after
):
    agenda = agenda_in_state(submitter, state)
    before = snapshot(agenda)

    response = client.post(f"/api/v1/agendas/{agenda.pk}/{action}/", {}, format="json")

    assert response.status_code == status, response.json()
    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == after
    if status == 409:
        current = state.split("_")[0]
        assert response.json()["current_state"] == current
        assert f"is {current}" in response.json()["detail"]
        assert snapshot(agenda) == before
    else:
        assert response.json()["state"] == after
        assert response.json()["progress"]["state"] == after


def test_abort_of_an_executing_agenda_asks_its_worker_to_stop(client, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "executing")

    body = client.post(f"/api/v1/agendas/{agenda.pk}/abort/").json()

    assert (body["state"], body["progress"]["abort_requested"]) == ("executing", True)


def test_pause_of_an_executing_agenda_asks_its_worker_to_pause(client, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "executing")

    body = client.post(f"/api/v1/agendas/{agenda.pk}/pause/").json()

    assert (body["state"], body["progress"]["pause_requested"]) == ("executing", True)


def test_abort_writes_one_callback_when_the_customer_has_a_url(
    client, customer, submitter, agenda_in_state
):
    customer.callback_url = "https://hooks.example.com/pop"
    customer.save(update_fields=["callback_url"])
    agenda = agenda_in_state(submitter, "ready")

    client.post(f"/api/v1/agendas/{agenda.pk}/abort/")

    events = CallbackDelivery.objects.filter(agenda=agenda).values_list("event", flat=True)
    assert list(events) == ["aborted"]
    assert not ReadyAgenda.objects.filter(agenda=agenda).exists()


def test_rerun_of_chosen_operations_resets_their_dependants(client, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "succeeded")

    response = client.post(
        f"/api/v1/agendas/{agenda.pk}/rerun/",
        {"mode": "operations_to_reset", "operations": ["probe"]},
        format="json",
    )

    assert response.status_code == 200
    states = {op["name"]: op["state"] for op in response.json()["progress"]["operations"]}
    assert states == {"probe": "waiting", "report": "waiting"}
    assert response.json()["state"] == "ready"


def test_rerun_of_chosen_operations_recomputes_the_percent_from_what_is_kept(
    client, submitter, submit_agenda, insight
):
    agenda = submit_agenda(submitter)
    insight_fill(insight_id=insight.pk)
    [item] = insight_pull(principal=SYSTEM, insight=insight, worker="w1", count=1)
    done = [{"name": "probe", "state": "succeeded"}, {"name": "report", "state": "succeeded"}]
    execution_report(
        execution_id=item.execution.pk,
        lease_token=item.execution.lease_token,
        operations=done,
        state="succeeded",
    )
    assert AgendaProgress.objects.get(agenda=agenda).percent_complete == 100.0

    body = client.post(
        f"/api/v1/agendas/{agenda.pk}/rerun/",
        {"mode": "operations_to_reset", "operations": ["report"]},
        format="json",
    ).json()

    # probe is kept (succeeded), report runs again: half of the agenda is done.
    assert body["progress"]["percent_complete"] == 50.0
    assert AgendaProgress.objects.get(agenda=agenda).percent_complete == 50.0


def test_rerun_with_skip_execution_holds_the_agenda(client, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "failed")

    body = client.post(
        f"/api/v1/agendas/{agenda.pk}/rerun/",
        {"mode": "reset_all", "skip_execution": True},
        format="json",
    ).json()

    assert (body["state"], body["progress"]["do_not_run"]) == ("pending", True)
    assert not ReadyAgenda.objects.filter(agenda=agenda).exists()


def test_rerun_with_a_bad_mode_or_unknown_operations_is_400_and_changes_nothing(
    client, submitter, agenda_in_state, snapshot
):
    agenda = agenda_in_state(submitter, "failed")
    before = snapshot(agenda)
    url = f"/api/v1/agendas/{agenda.pk}/rerun/"

    bad_mode = client.post(url, {"mode": "again"}, format="json")
    unknown = client.post(
        url, {"mode": "operations_to_reset", "operations": ["ghost"]}, format="json"
    )

    assert (bad_mode.status_code, list(bad_mode.json())) == (400, ["mode"])
    assert (unknown.status_code, list(unknown.json())) == (400, ["operations"])
    assert snapshot(agenda) == before


@pytest.mark.parametrize("action", ["abort", "pause", "resume", "rerun"])
def test_a_viewer_may_not_act_on_an_agenda(
    viewer_client, submitter, agenda_in_state, snapshot, action
):
    agenda = agenda_in_state(submitter, "paused")
    before = snapshot(agenda)

    response = viewer_client.post(f"/api/v1/agendas/{agenda.pk}/{action}/", {}, format="json")

    assert response.status_code == 403
    assert snapshot(agenda) == before


@pytest.mark.parametrize("action", ["abort", "pause", "resume", "rerun"])
def test_acting_on_another_customers_agenda_is_404_and_changes_nothing(
    client, other_submitter, agenda_in_state, snapshot, action
):
    agenda = agenda_in_state(other_submitter, "paused")
    before = snapshot(agenda)

    response = client.post(f"/api/v1/agendas/{agenda.pk}/{action}/", {}, format="json")

    assert response.status_code == 404
    assert snapshot(agenda) == before
