"""An operator stops a queue or a customer without touching agendas one by one: a paused insight
is not filled and hands out nothing while executing work finishes; a held customer's agendas
stay ready while everyone else is served. Both say so as the agendas' waiting reason."""

import pytest

from agendas.models import AgendaProgress
from agendas.services import agenda_pause, agenda_resume
from agendas.waiting import waiting_reason
from scheduling.models import QueuedAgenda, ReadyAgenda

pytestmark = pytest.mark.django_db


def _state(agenda):
    return AgendaProgress.objects.get(agenda=agenda).state


def _reason(agenda):
    progress = AgendaProgress.objects.select_related("agenda__customer", "agenda__insight").get(
        agenda=agenda
    )
    return waiting_reason(progress)


def test_a_paused_insight_is_not_filled_hands_out_nothing_and_lets_running_work_finish(
    submitter, submit_agenda, insight, fill, pull, report
):
    running = submit_agenda(submitter)
    queued = submit_agenda(submitter)
    fill(insight)
    (pulled,) = pull(insight, count=1)
    waiting = submit_agenda(submitter)
    insight.paused = True
    insight.save()

    filled = fill(insight)
    handed_out = pull(insight, count=5)
    answer = report(pulled, state="succeeded")

    assert (filled.moved, handed_out) == (0, [])
    assert (_state(queued), _state(waiting)) == ("queued", "ready")
    assert answer.state == _state(running) == "succeeded"
    assert _reason(queued)["code"] == _reason(waiting)["code"] == "insight_paused"

    insight.paused = False
    insight.save()
    # The queued one, and the waiting one by the pull's own inline fill.
    assert len(pull(insight, count=5)) == 2
    assert fill(insight).moved == 0


def test_a_held_customers_agendas_stay_ready_while_others_are_served(
    customer, submitter, other_submitter, submit_agenda, insight, fill
):
    customer.held = True
    customer.save()
    mine = [submit_agenda(submitter) for _ in range(2)]
    theirs = [submit_agenda(other_submitter) for _ in range(2)]

    fill(insight)

    assert {_state(agenda) for agenda in mine} == {"ready"}
    assert {_state(agenda) for agenda in theirs} == {"queued"}
    assert _reason(mine[0]) == {
        "code": "customer_held",
        "message": "The customer acme is held: none of its agendas is queued until it is released.",
        "detail": {"customer": "acme"},
    }

    customer.held = False
    customer.save()
    assert fill(insight).moved == 2
    assert ReadyAgenda.objects.count() == 0 and QueuedAgenda.objects.count() == 4


def test_a_customers_admin_holds_it_and_a_submitter_may_not(
    customer, admin_member, submitter, api_client_for
):
    url = f"/api/v1/customers/{customer.pk}/"

    refused = api_client_for(submitter).patch(url, {"held": True}, format="json")
    customer.refresh_from_db()
    assert refused.status_code == 403 and customer.held is False

    accepted = api_client_for(admin_member).patch(url, {"held": True}, format="json")
    customer.refresh_from_db()
    assert accepted.status_code == 200 and customer.held is True


def test_the_pool_owners_admin_pauses_an_insight_and_another_customer_cannot(
    insight, pool_owner, make_principal, other_customer, api_client_for
):
    owner_admin = make_principal(pool_owner, role="admin", username="owner-admin")
    other_admin = make_principal(other_customer, role="admin", username="other-admin")
    url = f"/api/v1/insights/{insight.pk}/"

    refused = api_client_for(other_admin).patch(url, {"paused": True}, format="json")
    insight.refresh_from_db()
    assert refused.status_code in (403, 404) and insight.paused is False

    accepted = api_client_for(owner_admin).patch(url, {"paused": True}, format="json")
    insight.refresh_from_db()
    assert accepted.status_code == 200 and insight.paused is True


def test_resume_withdraws_a_pause_not_yet_honoured(
    submitter, submit_agenda, insight, fill, pull, report
):
    agenda = submit_agenda(submitter)
    fill(insight)
    (pulled,) = pull(insight, count=1)
    agenda_pause(principal=submitter.user, agenda=agenda)
    assert report(pulled).pause is True

    progress = agenda_resume(principal=submitter.user, agenda=agenda)

    assert (progress.state, progress.pause_requested) == ("executing", False)
    assert report(pulled).pause is False
    assert report(pulled, state="succeeded").state == "succeeded"
