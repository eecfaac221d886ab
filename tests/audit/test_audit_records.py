"""Every state-changing action of a person or token leaves exactly one audit event."""

import pytest
from django.test import Client

from agendas.models import Agenda
from agendas.services import agenda_abort
from audit.models import AuditEvent
from core.principals import SYSTEM
from resourcepools.models import Membership
from scheduling.models import Schedule
from tests.audit.conftest import ADDRESS

pytestmark = pytest.mark.django_db
Role = Membership.Role


def _only_new_event(before: set) -> AuditEvent:
    (event,) = AuditEvent.objects.exclude(pk__in=before)
    return event


def _ids() -> set:
    return set(AuditEvent.objects.values_list("pk", flat=True))


def test_a_submit_by_token_records_who_with_which_token_for_whom_and_from_where(
    submitter, customer, insight, operations, token_client
):
    before = _ids()

    response = token_client(submitter).post(
        "/api/v1/agendas/", {"operations": operations}, format="json"
    )

    assert response.status_code == 201, response.content
    event = _only_new_event(before)
    assert (event.action, event.target_type, event.target_id) == (
        "agenda.submit",
        "agendas.agenda",
        response.json()["id"],
    )
    assert (event.user, event.username, event.token_name) == (
        submitter.user,
        submitter.user.username,
        "tests",
    )
    assert event.customer == customer
    assert event.address == ADDRESS
    assert event.cid == response["X-POP-CID"]


def test_an_idempotent_repeat_of_a_submit_records_nothing(
    submitter, insight, operations, token_client
):
    client = token_client(submitter)
    body = {"operations": operations}
    client.post("/api/v1/agendas/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    before = _ids()

    again = client.post("/api/v1/agendas/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")

    assert again.status_code == 200
    assert _ids() == before


def test_an_abort_records_one_event_with_the_state_it_left(
    submitter, customer, submit_agenda, token_client
):
    agenda = submit_agenda(submitter)
    before = _ids()

    response = token_client(submitter).post(f"/api/v1/agendas/{agenda.pk}/abort/")

    assert response.status_code == 200
    event = _only_new_event(before)
    assert (event.action, event.target_id, event.customer_id) == (
        "agenda.abort",
        str(agenda.pk),
        customer.pk,
    )
    assert event.detail == {"state": "ready"}
    assert (event.username, event.token_name, event.address) == (
        submitter.user.username,
        "tests",
        ADDRESS,
    )


def test_a_rerun_records_one_event_with_its_mode(submitter, submit_agenda, token_client):
    agenda = submit_agenda(submitter)
    agenda_abort(principal=submitter.user, agenda=agenda)
    before = _ids()

    response = token_client(submitter).post(
        f"/api/v1/agendas/{agenda.pk}/rerun/", {"mode": "reset_all"}, format="json"
    )

    assert response.status_code == 200, response.content
    event = _only_new_event(before)
    assert (event.action, event.target_id, event.username) == (
        "agenda.rerun",
        str(agenda.pk),
        submitter.user.username,
    )
    assert event.detail == {"state": "aborted", "mode": "reset_all", "operations": []}


def test_a_pause_and_a_resume_record_one_event_each(submitter, submit_agenda, token_client):
    agenda = submit_agenda(submitter)
    client = token_client(submitter)
    before = _ids()

    client.post(f"/api/v1/agendas/{agenda.pk}/pause/")
    client.post(f"/api/v1/agendas/{agenda.pk}/resume/")

    actions = sorted(AuditEvent.objects.exclude(pk__in=before).values_list("action", flat=True))
    assert actions == ["agenda.pause", "agenda.resume"]


def test_a_template_edit_records_the_fields_it_changed_never_their_values(
    admin_member, customer, template, token_client
):
    before = _ids()

    response = token_client(admin_member).patch(
        f"/api/v1/agenda-templates/{template.pk}/",
        {"description": "secret-ish text"},
        format="json",
    )

    assert response.status_code == 200, response.content
    event = _only_new_event(before)
    assert (event.action, event.target_type, event.target_id, event.customer_id) == (
        "template.update",
        "agendas.agendatemplate",
        str(template.pk),
        customer.pk,
    )
    assert event.detail == {"fields": ["description"]}
    assert event.username == admin_member.user.username


def test_a_template_run_records_one_event_not_one_per_layer(
    submitter, template, insight, token_client
):
    before = _ids()

    response = token_client(submitter).post(
        f"/api/v1/agenda-templates/{template.pk}/run/",
        {"payload": {"url": "s3://in/b.mp4"}},
        format="json",
    )

    assert response.status_code == 201, response.content
    event = _only_new_event(before)
    agenda = Agenda.objects.get(template=template)
    assert (event.action, event.target_id, event.detail) == (
        "template.run",
        str(agenda.pk),
        {"template": str(template.pk)},
    )


def test_a_schedule_edit_records_one_event(admin_member, customer, schedule, token_client):
    before = _ids()

    response = token_client(admin_member).patch(
        f"/api/v1/schedules/{schedule.pk}/", {"cron": "30 4 * * *"}, format="json"
    )

    assert response.status_code == 200, response.content
    event = _only_new_event(before)
    assert (event.action, event.target_type, event.target_id, event.customer_id) == (
        "schedule.update",
        "scheduling.schedule",
        str(schedule.pk),
        customer.pk,
    )
    assert event.detail == {"fields": ["cron"]}


def test_a_schedule_trigger_records_one_event_naming_the_agenda(submitter, schedule, token_client):
    before = _ids()

    response = token_client(submitter).post(f"/api/v1/schedules/{schedule.pk}/trigger/")

    assert response.status_code in (200, 201), response.content
    event = _only_new_event(before)
    agenda = Agenda.objects.get(schedule=schedule)
    assert (event.action, event.target_id, event.detail) == (
        "schedule.trigger",
        str(schedule.pk),
        {"agenda": str(agenda.pk)},
    )


def test_a_member_role_change_records_one_event_with_both_roles(
    admin_member, viewer, customer, token_client
):
    membership = Membership.objects.get(user=viewer.user, customer=customer)
    before = _ids()

    response = token_client(admin_member).patch(
        f"/api/v1/customers/{customer.pk}/members/{membership.pk}/",
        {"role": "submitter"},
        format="json",
    )

    assert response.status_code == 200, response.content
    event = _only_new_event(before)
    assert (event.action, event.target_type, event.target_id, event.customer_id) == (
        "member.update",
        "resourcepools.membership",
        str(membership.pk),
        customer.pk,
    )
    assert event.detail == {"user": viewer.user.username, "from": "viewer", "to": "submitter"}
    assert (event.username, event.token_name) == (admin_member.user.username, "tests")


def test_a_refused_action_records_nothing(
    viewer, other_submitter, submitter, submit_agenda, schedule, token_client
):
    agenda = submit_agenda(submitter)
    before = _ids()

    refused = [
        token_client(viewer).post(f"/api/v1/agendas/{agenda.pk}/abort/"),
        token_client(other_submitter).post(f"/api/v1/agendas/{agenda.pk}/abort/"),
        token_client(submitter).patch(
            f"/api/v1/schedules/{schedule.pk}/", {"cron": "1 1 * * *"}, format="json"
        ),
        token_client(submitter).post(f"/api/v1/agendas/{agenda.pk}/resume/"),  # 409: not paused
    ]

    assert [response.status_code for response in refused] == [403, 404, 403, 409]
    assert _ids() == before
    assert Schedule.objects.get(pk=schedule.pk).cron == "0 3 * * *"


def test_a_bulk_submit_of_500_agendas_writes_one_event(
    submitter, customer, insight, operations, token_client
):
    before = _ids()

    response = token_client(submitter).post(
        "/api/v1/agendas/bulk/",
        {"agendas": [{"operations": operations} for _ in range(500)]},
        format="json",
    )

    assert response.status_code == 200, response.content
    event = _only_new_event(before)
    ids = [result["id"] for result in response.json()["results"]]
    assert (event.action, event.customer_id, event.target_type) == (
        "agenda.submit_many",
        customer.pk,
        "agendas.agenda",
    )
    assert event.detail == {"count": 500, "ids": ids[:100]}
    assert (event.username, event.token_name) == (submitter.user.username, "tests")


def test_a_session_action_records_no_token_name(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    client = Client(REMOTE_ADDR=ADDRESS)
    client.force_login(submitter.user)
    before = _ids()

    response = client.post(f"/agendas/{agenda.pk}/abort/")

    assert response.status_code == 302
    event = _only_new_event(before)
    assert (event.action, event.username, event.token_name, event.address) == (
        "agenda.abort",
        submitter.user.username,
        "",
        ADDRESS,
    )


def test_an_action_outside_a_request_is_the_systems(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    before = _ids()

    agenda_abort(principal=SYSTEM, agenda=agenda)

    event = _only_new_event(before)
    assert (event.username, event.user, event.token_name, event.address) == (
        "system",
        None,
        "",
        None,
    )


def test_a_forwarded_for_header_is_ignored_without_a_trusted_proxy(
    submitter, submit_agenda, token_client
):
    agenda = submit_agenda(submitter)
    before = _ids()

    token_client(submitter).post(
        f"/api/v1/agendas/{agenda.pk}/abort/", HTTP_X_FORWARDED_FOR="198.51.100.9"
    )

    assert _only_new_event(before).address == ADDRESS


def test_behind_one_trusted_proxy_the_forwarded_address_is_recorded(
    settings, submitter, submit_agenda, token_client
):
    settings.POP_NUM_PROXIES = 1
    agenda = submit_agenda(submitter)
    before = _ids()

    token_client(submitter).post(
        f"/api/v1/agendas/{agenda.pk}/abort/", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.9"
    )

    assert _only_new_event(before).address == "198.51.100.9"
