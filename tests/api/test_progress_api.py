"""agenda-progress/, operation-progress/ and progress-summary/ (docs/design.md §9, §10)."""

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_agenda_progress_lists_your_rows_with_their_operations(
    client, submitter, other_submitter, agenda_in_state
):
    mine = agenda_in_state(submitter, "paused", link_id="p")
    agenda_in_state(other_submitter, "paused", link_id="p")

    response = client.get("/api/v1/agenda-progress/", {"state": "paused"})

    assert response.status_code == 200
    (row,) = response.json()["results"]
    assert (row["agenda"], row["state"], row["processing_state"]) == (
        str(mine.pk),
        "paused",
        "waiting",
    )
    assert [op["name"] for op in row["operations"]] == ["probe", "report"]


def test_agenda_progress_filters_by_agenda_and_rejects_bad_values(
    client, submitter, agenda_in_state
):
    agenda = agenda_in_state(submitter, "ready")
    agenda_in_state(submitter, "ready")

    by_agenda = client.get("/api/v1/agenda-progress/", {"agenda": str(agenda.pk)}).json()
    bad = client.get("/api/v1/agenda-progress/", {"agenda": "nope", "state": "lost"})

    assert [row["agenda"] for row in by_agenda["results"]] == [str(agenda.pk)]
    assert (bad.status_code, set(bad.json())) == (400, {"agenda", "state"})


def test_another_customers_progress_is_404(client, other_submitter, agenda_in_state):
    agenda = agenda_in_state(other_submitter, "ready")
    progress_id = agenda.progress.pk
    operation_id = agenda.progress.operations.first().pk

    assert client.get(f"/api/v1/agenda-progress/{progress_id}/").status_code == 404
    assert client.get(f"/api/v1/operation-progress/{operation_id}/").status_code == 404


def test_operation_progress_filters_by_name_and_agenda(client, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "ready")
    agenda_in_state(submitter, "ready")

    response = client.get(
        "/api/v1/operation-progress/", {"agenda": str(agenda.pk), "name": "report"}
    )

    (row,) = response.json()["results"]
    assert (row["agenda"], row["name"], row["type"], row["state"]) == (
        str(agenda.pk),
        "report",
        "log",
        "waiting",
    )


def test_operation_progress_filters_by_the_cid_and_the_type_of_your_agendas_only(
    client, submitter, other_submitter, submit_agenda
):
    mine = submit_agenda(submitter, cid="req-7")
    submit_agenda(submitter, cid="req-8")
    submit_agenda(other_submitter, cid="req-7")  # another customer's, under the same cid

    by_cid = client.get("/api/v1/operation-progress/", {"cid": "req-7"}).json()
    by_both = client.get("/api/v1/operation-progress/", {"cid": "req-7", "type": "log"}).json()
    nobody = client.get("/api/v1/operation-progress/", {"type": "transcode"}).json()

    assert sorted((row["agenda"], row["name"]) for row in by_cid["results"]) == [
        (str(mine.pk), "probe"),
        (str(mine.pk), "report"),
    ]
    assert all(row["cid"] == "req-7" for row in by_cid["results"])
    assert [(row["agenda"], row["type"]) for row in by_both["results"]] == [(str(mine.pk), "log")]
    assert (nobody["count"], nobody["results"]) == (0, [])


def test_a_worker_member_reads_no_agenda_progress(
    api_client_for, worker, submitter, agenda_in_state
):
    agenda_in_state(submitter, "ready")

    response = api_client_for(worker).get("/api/v1/agenda-progress/")

    assert (response.status_code, response.json()["count"]) == (200, 0)


def test_progress_summary_combines_the_agendas_of_a_link_id(
    client, submitter, other_submitter, agenda_in_state
):
    agenda_in_state(other_submitter, "failed", link_id="job-7")
    done = agenda_in_state(submitter, "succeeded", link_id="job-7")
    waiting = agenda_in_state(submitter, "ready", link_id="job-7")

    response = client.get("/api/v1/progress-summary/", {"link_id": "job-7"})

    assert response.status_code == 200
    body = response.json()
    assert body["link_id"] == "job-7"
    assert body["counts"] == {"succeeded": 1, "ready": 1}
    assert body["processing_state"] == "executing"
    assert body["percent_complete"] == 50.0
    assert {row["id"] for row in body["agendas"]} == {str(done.pk), str(waiting.pk)}


def test_progress_summary_of_an_unknown_or_foreign_link_id_is_404(
    client, other_submitter, agenda_in_state
):
    agenda_in_state(other_submitter, "succeeded", link_id="theirs")

    unknown = client.get("/api/v1/progress-summary/", {"link_id": "no-such-batch"})
    foreign = client.get("/api/v1/progress-summary/", {"link_id": "theirs"})

    assert (unknown.status_code, foreign.status_code) == (404, 404)
    assert "complete" not in unknown.content.decode()


def test_progress_summary_without_link_id_is_400(client):
    response = client.get("/api/v1/progress-summary/")

    assert (response.status_code, list(response.json())) == (400, ["link_id"])


def test_progress_summary_needs_credentials():
    assert APIClient().get("/api/v1/progress-summary/", {"link_id": "x"}).status_code == 401


def test_progress_summary_pages_its_agendas_and_counts_them_all(client, submitter, submit_agenda):
    agendas = [submit_agenda(submitter, link_id="big-show") for _ in range(7)]

    first = client.get("/api/v1/progress-summary/?link_id=big-show&limit=3").json()
    last = client.get("/api/v1/progress-summary/?link_id=big-show&limit=3&offset=6").json()

    assert first["total"] == last["total"] == 7
    assert first["counts"] == {"ready": 7}
    assert [row["id"] for row in first["agendas"]] == [str(a.pk) for a in agendas[:3]]
    assert [row["id"] for row in last["agendas"]] == [str(agendas[6].pk)]
    assert client.get("/api/v1/progress-summary/?link_id=big-show&limit=5000").status_code == 400
