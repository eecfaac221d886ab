"""Actions on a set from `/agendas/` (docs/design.md §7.4): tick rows or take every match, see
the count on a confirmation, then follow the job."""

import re

import pytest

from agendas.bulk_actions import agenda_action_jobs_run
from agendas.models import AgendaActionJob, AgendaProgress

pytestmark = pytest.mark.django_db


def states_of(agendas) -> list[str]:
    return [AgendaProgress.objects.get(agenda=agenda).state for agenda in agendas]


@pytest.fixture
def show(submit_agenda, submitter):
    return [submit_agenda(submitter, link_id="show-9") for _ in range(3)]


def test_a_submitter_sees_tick_boxes_and_the_action_bar_a_viewer_does_not(
    client_for, submitter, viewer, show
):
    mine = client_for(submitter).get("/agendas/").content.decode()
    theirs = client_for(viewer).get("/agendas/").content.decode()

    assert 'id="agenda-actions"' in mine and mine.count('name="ids"') == 3
    assert 'id="agenda-actions"' not in theirs and 'name="ids"' not in theirs


def test_ticked_rows_are_confirmed_with_their_count_and_nothing_changes_before(
    client_for, submitter, show
):
    client = client_for(submitter)

    page = client.post(
        "/agendas/actions/",
        {"action": "abort", "scope": "selected", "ids": [str(a.pk) for a in show[:2]]},
    )

    text = page.content.decode()
    assert page.status_code == 200
    assert "Abort 2 agendas?" in text
    assert states_of(show) == ["ready"] * 3
    assert not AgendaActionJob.objects.exists()


def test_confirming_every_match_starts_a_job_whose_page_follows_it_to_done(
    client_for, submitter, show, submit_agenda
):
    other = submit_agenda(submitter, link_id="elsewhere")
    client = client_for(submitter)
    asked = {"action": "pause", "scope": "matching", "query": "link_id=show-9"}

    confirm = client.post("/agendas/actions/", asked).content.decode()
    started = client.post("/agendas/actions/", {**asked, "confirmed": "yes"})

    assert re.search(r"<strong>3</strong> match", confirm)
    job = AgendaActionJob.objects.get()
    assert started.status_code == 302 and started["Location"] == f"/agendas/actions/{job.pk}/"
    running = client.get(started["Location"]).content.decode()
    assert "0 of 3" in running and "data-refresh-stop" not in running
    agenda_action_jobs_run(job_id=job.pk)
    done = client.get(f"/agendas/actions/{job.pk}/?partial=1").content.decode()
    assert "3 of 3" in done and "data-refresh-stop" in done
    assert states_of(show) == ["paused"] * 3
    assert states_of([other]) == ["ready"]


def test_every_match_is_refused_while_the_search_box_is_used(client_for, submitter, show):
    client = client_for(submitter)

    answer = client.post(
        "/agendas/actions/",
        {"action": "abort", "scope": "matching", "query": "text=show", "confirmed": "yes"},
        follow=True,
    )

    assert "Clear the search box" in answer.content.decode()
    assert not AgendaActionJob.objects.exists()
    assert states_of(show) == ["ready"] * 3


def test_nothing_ticked_or_no_action_is_a_message_not_an_error(client_for, submitter, show):
    client = client_for(submitter)

    nothing = client.post("/agendas/actions/", {"action": "abort"}, follow=True)
    no_action = client.post("/agendas/actions/", {"ids": [str(show[0].pk)]}, follow=True)

    assert "Tick at least one agenda" in nothing.content.decode()
    assert "Choose an action" in no_action.content.decode()
    assert not AgendaActionJob.objects.exists()


def test_another_users_job_page_is_a_404(client_for, submitter, other_submitter, show):
    client_for(submitter).post(
        "/agendas/actions/",
        {"action": "abort", "scope": "selected", "ids": [str(show[0].pk)], "confirmed": "yes"},
    )
    job = AgendaActionJob.objects.get()

    assert client_for(other_submitter).get(f"/agendas/actions/{job.pk}/").status_code == 404


def test_another_customers_agendas_ticked_by_id_are_never_matched(
    client_for, other_submitter, show
):
    page = client_for(other_submitter).post(
        "/agendas/actions/", {"action": "abort", "ids": [str(a.pk) for a in show]}
    )

    assert re.search(r"<strong>0</strong> match", page.content.decode())
    assert states_of(show) == ["ready"] * 3
