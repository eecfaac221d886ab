"""Actions on a filter (docs/design.md §7.4): `POST agendas/actions/` counts in a dry run, or
records a job that works through the set in batches, every agenda through the state machine,
inside the caller's scope."""

import pytest

from agendas import bulk_actions
from agendas.bulk_actions import agenda_action_jobs_run
from agendas.models import AgendaActionJob, AgendaProgress

pytestmark = pytest.mark.django_db

URL = "/api/v1/agendas/actions/"


def states_of(agendas) -> list[str]:
    return [AgendaProgress.objects.get(agenda=agenda).state for agenda in agendas]


def act(client, status=202, **body):
    answer = client.post(URL, body, format="json")
    assert answer.status_code == status, answer.json()
    return answer.json()


def run_job(client, job_id) -> dict:
    agenda_action_jobs_run(job_id=job_id)
    answer = client.get(f"{URL}{job_id}/")
    assert answer.status_code == 200
    return answer.json()


@pytest.fixture
def batch(agenda_in_state, submitter):
    """Agendas labelled batch=42 in several states, and one of another batch (finished ones
    first: reaching a final state pulls whatever is queued)."""
    failed = [agenda_in_state(submitter, "failed", labels={"batch": "42"}) for _ in range(2)]
    succeeded = agenda_in_state(submitter, "succeeded", labels={"batch": "42"})
    return {
        "failed": failed,
        "succeeded": succeeded,
        "ready": [agenda_in_state(submitter, "ready", labels={"batch": "42"}) for _ in range(3)],
        "elsewhere": agenda_in_state(submitter, "ready", labels={"batch": "7"}),
    }


def test_a_dry_run_counts_what_matches_and_what_would_change_and_changes_nothing(
    client, batch, snapshot
):
    agendas = [*batch["ready"], *batch["failed"], batch["succeeded"], batch["elsewhere"]]
    before = [snapshot(agenda) for agenda in agendas]

    answer = act(client, 200, action="abort", filter={"label": ["batch:42"]}, dry_run=True)

    assert answer == {"dry_run": True, "action": "abort", "matched": 6, "would_change": 3}
    assert [snapshot(agenda) for agenda in agendas] == before
    assert not AgendaActionJob.objects.exists()


def test_an_abort_by_filter_aborts_the_matching_waiting_agendas_and_counts_the_rest(client, batch):
    job = act(client, action="abort", filter={"label": ["batch:42"]})
    assert (job["status"], job["matched"], job["done"]) == ("running", 6, False)

    done = run_job(client, job["id"])

    assert (done["status"], done["done"], done["processed"], done["changed"]) == (
        "done",
        True,
        6,
        3,
    )
    assert done["skipped"] == {"failed: cannot abort": 2, "succeeded: cannot abort": 1}
    assert states_of(batch["ready"]) == ["aborted"] * 3
    assert states_of(batch["failed"]) == ["failed"] * 2
    assert states_of([batch["elsewhere"]]) == ["ready"]


def test_a_rerun_of_the_failed_agendas_of_a_set_puts_them_back_to_work(client, batch):
    job = act(client, action="rerun", filter={"label": ["batch:42"], "state": ["failed"]})

    done = run_job(client, job["id"])

    assert (done["matched"], done["changed"], done["skipped"]) == (2, 2, {})
    assert states_of(batch["failed"]) == ["ready"] * 2


def test_a_second_job_on_the_same_set_changes_nothing_more(client, batch):
    run_job(client, act(client, action="pause", filter={"label": ["batch:42"]})["id"])
    paused = states_of(batch["ready"])

    again = run_job(client, act(client, action="pause", filter={"label": ["batch:42"]})["id"])

    assert paused == ["paused"] * 3
    assert again["changed"] == 0
    assert again["skipped"]["paused: cannot pause"] == 3
    assert states_of(batch["ready"]) == paused


def test_executing_agendas_are_asked_to_stop_by_their_worker(client, agenda_in_state, submitter):
    executing = agenda_in_state(submitter, "executing", link_id="show-1")

    done = run_job(client, act(client, action="abort", filter={"link_id": "show-1"})["id"])

    progress = AgendaProgress.objects.get(agenda=executing)
    assert (done["changed"], progress.state, progress.abort_requested) == (1, "executing", True)
    again = run_job(client, act(client, action="abort", filter={"link_id": "show-1"})["id"])
    assert again["skipped"] == {"abort already requested": 1}


def test_a_job_works_in_batches_and_resumes_from_its_cursor(client, submit_agenda, submitter):
    agendas = [submit_agenda(submitter, link_id="many") for _ in range(7)]
    job = act(client, action="pause", filter={"link_id": "many"})
    bulk_actions.BATCH_SIZE, saved = 3, bulk_actions.BATCH_SIZE
    try:
        assert bulk_actions._batch_run(job["id"]) is True
        middle = AgendaActionJob.objects.get(pk=job["id"])
        assert (middle.processed, middle.changed, middle.status) == (3, 3, "running")
        assert sorted(states_of(agendas)) == ["paused"] * 3 + ["ready"] * 4
        agenda_action_jobs_run(job_id=job["id"])
    finally:
        bulk_actions.BATCH_SIZE = saved

    done = AgendaActionJob.objects.get(pk=job["id"])
    assert (done.processed, done.changed, done.status) == (7, 7, "done")
    assert states_of(agendas) == ["paused"] * 7


def test_ids_select_agendas_too(client, batch):
    chosen = batch["ready"][:2]

    done = run_job(client, act(client, action="abort", ids=[str(a.pk) for a in chosen])["id"])

    assert (done["matched"], done["changed"]) == (2, 2)
    assert states_of(batch["ready"]) == ["aborted", "aborted", "ready"]


def test_a_customers_filter_never_touches_another_customers_agendas(
    client, other_client, batch, agenda_in_state, other_submitter, customer
):
    theirs = agenda_in_state(other_submitter, "ready", labels={"batch": "42"})

    mine = run_job(client, act(client, action="abort", filter={"label": ["batch:42"]})["id"])
    pointed = act(client, 200, action="abort", filter={"customer": str(customer.pk)}, dry_run=True)
    foreign_ids = act(client, 200, action="abort", ids=[str(theirs.pk)], dry_run=True)

    assert mine["matched"] == 6
    assert states_of([theirs]) == ["ready"]
    assert pointed["matched"] == 7  # Acme's own seven
    assert foreign_ids["matched"] == 0


def test_a_viewer_matches_nothing_it_may_not_change(viewer_client, batch):
    answer = act(viewer_client, 200, action="abort", filter={"label": ["batch:42"]}, dry_run=True)

    assert answer["matched"] == 0


def test_staff_act_on_every_customer(staff_client, batch, agenda_in_state, other_submitter):
    theirs = agenda_in_state(other_submitter, "ready", labels={"batch": "42"})

    done = run_job(
        staff_client, act(staff_client, action="abort", filter={"label": ["batch:42"]})["id"]
    )

    assert (done["matched"], done["changed"]) == (7, 4)
    assert states_of([theirs]) == ["aborted"]


def test_a_job_is_read_by_its_requester_and_staff_only(client, other_client, staff_client, batch):
    job = act(client, action="abort", filter={"label": ["batch:42"]})

    assert other_client.get(f"{URL}{job['id']}/").status_code == 404
    assert staff_client.get(f"{URL}{job['id']}/").status_code == 200
    assert [row["id"] for row in client.get(URL).json()["results"]] == [job["id"]]
    assert other_client.get(URL).json()["results"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "abort", "filter": {"nope": "x"}}, "filter.nope"),
        ({"action": "abort", "filter": {}}, "filter"),
        ({"action": "abort", "filter": {"state": [""]}}, "filter.state"),
        ({"action": "abort", "filter": {"state": ["finished"]}}, "filter.state"),
        ({"action": "abort", "filter": {"label": ["no-colon"]}}, "filter.label"),
        ({"action": "abort", "filter": {"created_after": "yesterday"}}, "filter.created_after"),
        ({"action": "abort", "filter": {"link_id": "x"}, "ids": []}, "filter"),
        ({"action": "abort"}, "filter"),
        ({"action": "abort", "ids": []}, "ids"),
        ({"action": "abort", "ids": ["not-a-uuid"]}, "ids.0"),
        ({"action": "explode", "filter": {"link_id": "x"}}, "action"),
        ({"action": "rerun", "filter": {"link_id": "x"}, "mode": "operations_to_reset"}, "mode"),
        ({"action": "abort", "filter": {"link_id": "x"}, "mode": "now"}, "mode"),
        ({"action": "abort", "filter": "state=failed"}, "filter"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_field_and_records_nothing(client, batch, body, field):
    answer = client.post(URL, body, format="json")

    assert answer.status_code == 400, answer.json()
    assert field in answer.json(), answer.json()
    assert not AgendaActionJob.objects.exists()
    assert states_of(batch["ready"]) == ["ready"] * 3


def test_a_job_of_a_user_who_is_gone_ends_failed_without_acting(client, batch, submitter):
    job = act(client, action="abort", filter={"label": ["batch:42"]})
    submitter.user.is_active = False
    submitter.user.save()

    agenda_action_jobs_run(job_id=job["id"])

    ended = AgendaActionJob.objects.get(pk=job["id"])
    assert (ended.status, ended.changed) == ("failed", 0)
    assert "inactive" in ended.error
    assert states_of(batch["ready"]) == ["ready"] * 3


def test_the_timed_process_takes_over_a_job_nobody_advanced(client, batch):
    job = act(client, action="abort", filter={"label": ["batch:42"]})
    assert agenda_action_jobs_run() == 0  # fresh: its own runner has it
    AgendaActionJob.objects.filter(pk=job["id"]).update(
        updated_at=AgendaActionJob.objects.get(pk=job["id"]).created_at - bulk_actions.STALE_AFTER
    )

    assert agenda_action_jobs_run() >= 1

    assert AgendaActionJob.objects.get(pk=job["id"]).status == "done"
