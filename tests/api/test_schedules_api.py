"""schedules/: CRUD, pause/resume (409 naming the state), trigger, runs (docs/design.md §3, §10)."""

from datetime import UTC, datetime

import pytest

from agendas.models import Agenda
from scheduling.models import Schedule
from tests.factories import AgendaTemplateFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def schedule_body(template):
    return {
        "name": "nightly",
        "template": str(template.pk),
        "payload": {"url": "s3://in/nightly.mp4"},
        "cron": "30 2 * * *",
        "timezone": "Europe/Paris",
    }


@pytest.fixture
def schedule(admin_client, schedule_body):
    response = admin_client.post("/api/v1/schedules/", schedule_body, format="json")
    assert response.status_code == 201, response.json()
    return Schedule.objects.get(pk=response.json()["id"])


def test_an_admin_creates_a_schedule_with_its_next_run_planned(admin_client, schedule_body):
    response = admin_client.post(
        "/api/v1/schedules/", schedule_body, format="json", HTTP_X_POP_CID="sched-1"
    )

    assert response.status_code == 201
    body = response.json()
    assert (body["state"], body["timezone"]) == ("active", "Europe/Paris")
    next_run = datetime.fromisoformat(body["next_run_at"])
    assert next_run.astimezone(UTC).minute == 30
    assert Schedule.objects.get(pk=body["id"]).cid == "sched-1"


def test_a_bad_cron_or_timezone_is_400_naming_the_field(admin_client, schedule_body):
    bad_cron = admin_client.post(
        "/api/v1/schedules/", {**schedule_body, "cron": "every night"}, format="json"
    )
    bad_zone = admin_client.post(
        "/api/v1/schedules/", {**schedule_body, "timezone": "Mars/Olympus"}, format="json"
    )

    assert (bad_cron.status_code, list(bad_cron.json())) == (400, ["cron"])
    assert (bad_zone.status_code, list(bad_zone.json())) == (400, ["timezone"])
    assert not Schedule.objects.exists()


def test_a_payload_the_template_refuses_is_400(admin_client, schedule_body):
    response = admin_client.post(
        "/api/v1/schedules/", {**schedule_body, "payload": {"nope": 1}}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["payload"])


def test_a_template_not_shared_with_the_customer_is_400(
    admin_client, schedule_body, other_customer
):
    theirs = AgendaTemplateFactory(customer=other_customer, name="theirs", is_global=False)

    response = admin_client.post(
        "/api/v1/schedules/", {**schedule_body, "template": str(theirs.pk)}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["template"])


def test_a_submitter_may_not_create_a_schedule(client, schedule_body):
    response = client.post("/api/v1/schedules/", schedule_body, format="json")

    assert response.status_code == 403
    assert not Schedule.objects.exists()


def test_an_admin_updates_and_deletes_a_schedule(admin_client, schedule):
    url = f"/api/v1/schedules/{schedule.pk}/"

    changed = admin_client.patch(url, {"cron": "0 * * * *"}, format="json")
    deleted = admin_client.delete(url)

    assert (changed.status_code, changed.json()["cron"]) == (200, "0 * * * *")
    assert deleted.status_code == 204
    assert not Schedule.objects.filter(pk=schedule.pk).exists()


def test_schedules_of_another_customer_are_404_on_every_verb(
    api_client_for, other_customer, make_principal, schedule
):
    outsider = api_client_for(make_principal(other_customer, "admin"))
    url = f"/api/v1/schedules/{schedule.pk}/"

    statuses = [
        outsider.get(url).status_code,
        outsider.patch(url, {"cron": "* * * * *"}, format="json").status_code,
        outsider.delete(url).status_code,
        outsider.post(f"{url}pause/").status_code,
        outsider.post(f"{url}trigger/").status_code,
        outsider.get(f"{url}runs/").status_code,
    ]

    assert statuses == [404] * 6
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.state) == ("30 2 * * *", "active")
    assert not Agenda.objects.exists()


def test_pause_and_resume_follow_the_schedule_state(admin_client, schedule):
    url = f"/api/v1/schedules/{schedule.pk}/"

    paused = admin_client.post(f"{url}pause/")
    paused_again = admin_client.post(f"{url}pause/")
    resumed = admin_client.post(f"{url}resume/")
    resumed_again = admin_client.post(f"{url}resume/")

    assert (paused.status_code, paused.json()["state"]) == (200, "paused")
    assert (paused_again.status_code, paused_again.json()["current_state"]) == (409, "paused")
    assert (resumed.status_code, resumed.json()["state"]) == (200, "active")
    assert (resumed_again.status_code, resumed_again.json()["current_state"]) == (409, "active")


def test_resuming_a_schedule_whose_end_has_passed_is_409_and_it_stays_paused(
    admin_client, schedule
):
    admin_client.post(f"/api/v1/schedules/{schedule.pk}/pause/")
    Schedule.objects.filter(pk=schedule.pk).update(end_at=datetime(2020, 1, 1, tzinfo=UTC))

    response = admin_client.post(f"/api/v1/schedules/{schedule.pk}/resume/")

    assert (response.status_code, response.json()["current_state"]) == (409, "paused")
    assert "end_at" in response.json()["detail"]
    assert Schedule.objects.get(pk=schedule.pk).state == "paused"


def test_a_submitter_may_not_pause_a_schedule(client, schedule):
    assert client.post(f"/api/v1/schedules/{schedule.pk}/pause/").status_code == 403
    schedule.refresh_from_db()
    assert schedule.state == "active"


def test_trigger_runs_the_template_now_and_runs_lists_it(client, schedule, insight):
    triggered = client.post(f"/api/v1/schedules/{schedule.pk}/trigger/")
    runs = client.get(f"/api/v1/schedules/{schedule.pk}/runs/")

    assert triggered.status_code == 201
    agenda = Agenda.objects.get(pk=triggered.json()["id"])
    assert (agenda.schedule, agenda.template) == (schedule, schedule.template)
    assert [row["id"] for row in runs.json()["results"]] == [str(agenda.pk)]
    schedule.refresh_from_db()
    assert schedule.last_run_at is not None


def test_a_viewer_may_not_trigger_a_schedule(viewer_client, schedule, insight):
    assert viewer_client.post(f"/api/v1/schedules/{schedule.pk}/trigger/").status_code == 403
    assert not Agenda.objects.exists()


def test_schedules_list_filters_by_state(viewer_client, admin_client, schedule):
    admin_client.post(f"/api/v1/schedules/{schedule.pk}/pause/")

    paused = viewer_client.get("/api/v1/schedules/", {"state": "paused"}).json()
    active = viewer_client.get("/api/v1/schedules/", {"state": "active"}).json()
    bad = viewer_client.get("/api/v1/schedules/", {"state": "sleeping"})

    assert [row["name"] for row in paused["results"]] == ["nightly"]
    assert active["count"] == 0
    assert (bad.status_code, list(bad.json())) == (400, ["state"])


def test_trigger_of_a_paused_schedule_is_409_and_runs_nothing(admin_client, schedule, insight):
    admin_client.post(f"/api/v1/schedules/{schedule.pk}/pause/")

    response = admin_client.post(f"/api/v1/schedules/{schedule.pk}/trigger/")

    assert (response.status_code, response.json()["current_state"]) == (409, "paused")
    assert not Agenda.objects.filter(schedule=schedule).exists()


def test_trigger_honours_overlap_skip_until_the_previous_run_is_finished(
    admin_client, schedule, insight
):
    Schedule.objects.filter(pk=schedule.pk).update(overlap=Schedule.Overlap.SKIP)
    url = f"/api/v1/schedules/{schedule.pk}/trigger/"

    first = admin_client.post(url)
    overlapping = admin_client.post(url)
    admin_client.post(f"/api/v1/agendas/{first.json()['id']}/abort/")  # the run is finished
    after = admin_client.post(url)

    assert first.status_code == 201
    assert (overlapping.status_code, overlapping.json()["current_state"]) == (409, "active")
    assert after.status_code == 201
    assert Agenda.objects.filter(schedule=schedule).count() == 2


def test_trigger_with_overlap_allow_runs_again_while_the_previous_run_is_unfinished(
    admin_client, schedule, insight
):
    url = f"/api/v1/schedules/{schedule.pk}/trigger/"

    statuses = [admin_client.post(url).status_code for _ in range(2)]

    assert schedule.overlap == Schedule.Overlap.ALLOW
    assert statuses == [201, 201]
