"""Who reads the trail (API and page), and that nothing edits or deletes it."""

import pytest
from django.contrib.admin.sites import site
from django.test import Client, RequestFactory

from audit.admin import AuditEventAdmin
from audit.models import AuditEvent
from audit.services import audit_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_admin(other_customer, make_principal):
    return make_principal(other_customer, "admin")


@pytest.fixture
def events(submitter, other_submitter, submit_agenda, api_client_for):
    """One abort in each customer, by its own submitter (by token)."""
    mine = submit_agenda(submitter)
    theirs = submit_agenda(other_submitter)
    for principal, agenda in ((submitter, mine), (other_submitter, theirs)):
        response = api_client_for(principal).post(f"/api/v1/agendas/{agenda.pk}/abort/")
        assert response.status_code == 200
    return {
        "mine": AuditEvent.objects.get(action="agenda.abort", target_id=str(mine.pk)),
        "theirs": AuditEvent.objects.get(action="agenda.abort", target_id=str(theirs.pk)),
    }


def _listed(client, query: str = "") -> list[str]:
    response = client.get(f"/api/v1/audit-events/{query}")
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_a_customer_admin_reads_only_its_customers_events(
    admin_member, other_admin, events, api_client_for
):
    assert _listed(api_client_for(admin_member), "?action=agenda.abort") == [str(events["mine"].pk)]
    assert _listed(api_client_for(other_admin), "?action=agenda.abort") == [
        str(events["theirs"].pk)
    ]


def test_another_customers_event_is_a_404_and_filtering_by_it_finds_nothing(
    admin_member, other_customer, events, api_client_for
):
    client = api_client_for(admin_member)

    response = client.get(f"/api/v1/audit-events/{events['theirs'].pk}/")

    assert response.status_code == 404
    assert _listed(client, f"?customer={other_customer.pk}") == []


def test_staff_read_every_event_including_those_of_no_customer(staff_user, events, api_client_for):
    audit_record(action="maintenance.note")
    listed = _listed(api_client_for(staff_user), "?limit=1000")

    assert {str(events["mine"].pk), str(events["theirs"].pk)} <= set(listed)
    assert str(AuditEvent.objects.get(action="maintenance.note").pk) in listed


def test_a_viewer_and_a_submitter_may_not_read_the_trail(viewer, submitter, events, api_client_for):
    for principal in (viewer, submitter):
        response = api_client_for(principal).get("/api/v1/audit-events/")

        assert response.status_code == 403
        assert "admin" in response.json()["detail"]


def test_the_filters_narrow_by_user_action_and_time(staff_user, submitter, events, api_client_for):
    client = api_client_for(staff_user)
    mine = events["mine"]

    assert _listed(client, f"?user={submitter.user.username}&action=agenda.abort") == [str(mine.pk)]
    since = mine.created_at.isoformat().replace("+00:00", "Z")
    assert str(mine.pk) in _listed(client, f"?since={since}&action=agenda.abort")
    assert str(mine.pk) not in _listed(client, f"?until={since}&action=agenda.abort")
    response = client.get("/api/v1/audit-events/?since=not-a-time")
    assert response.status_code == 400
    assert "since" in response.json()


def test_an_event_shows_who_what_and_where(admin_member, submitter, events, api_client_for):
    row = api_client_for(admin_member).get(f"/api/v1/audit-events/{events['mine'].pk}/").json()

    assert row["user"] == submitter.user.username
    assert row["action"] == "agenda.abort"
    assert row["target_type"] == "agendas.agenda"
    assert row["detail"] == {"state": "ready"}
    assert row["customer"] == str(admin_member.customer.pk)


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_no_one_changes_or_deletes_an_event_through_the_api(
    method, staff_user, events, api_client_for
):
    event = events["mine"]
    client = api_client_for(staff_user)

    response = getattr(client, method)(
        f"/api/v1/audit-events/{event.pk}/", {"action": "nothing"}, format="json"
    )

    assert response.status_code == 405
    assert AuditEvent.objects.get(pk=event.pk).action == "agenda.abort"


def test_no_one_creates_an_event_through_the_api(staff_user, api_client_for):
    count = AuditEvent.objects.count()

    response = api_client_for(staff_user).post(
        "/api/v1/audit-events/", {"action": "forged"}, format="json"
    )

    assert response.status_code == 405
    assert AuditEvent.objects.count() == count


def test_the_admin_grants_no_add_change_or_delete_even_to_a_superuser(staff_user, events):
    request = RequestFactory().get("/admin/")
    request.user = staff_user
    model_admin = AuditEventAdmin(AuditEvent, site)
    event = events["mine"]

    assert model_admin.has_add_permission(request) is False
    assert model_admin.has_change_permission(request, event) is False
    assert model_admin.has_delete_permission(request, event) is False
    assert model_admin.has_view_permission(request, event) is True


def test_the_admin_refuses_a_delete_post(staff_user, events):
    client = Client()
    client.force_login(staff_user)
    event = events["mine"]

    response = client.post(f"/admin/audit/auditevent/{event.pk}/delete/", {"post": "yes"})

    assert response.status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_a_saved_event_refuses_to_change_or_be_deleted(events):
    event = events["mine"]
    event.action = "forged"

    with pytest.raises(ValueError):
        event.save()
    with pytest.raises(ValueError):
        event.delete()
    assert AuditEvent.objects.get(pk=event.pk).action == "agenda.abort"


def test_the_audit_page_shows_an_admin_its_customers_events_only(
    admin_member, events, other_customer
):
    client = Client()
    client.force_login(admin_member.user)

    response = client.get("/audit/")

    assert response.status_code == 200
    page = response.content.decode()
    assert f'data-audit-event="{events["mine"].pk}"' in page
    assert f'data-audit-event="{events["theirs"].pk}"' not in page
    assert 'href="/audit/"' in page  # the navigation offers it


def test_the_audit_page_refuses_a_viewer_and_hides_the_link(viewer, events):
    client = Client()
    client.force_login(viewer.user)

    assert client.get("/audit/").status_code == 403
    assert 'href="/audit/"' not in client.get("/").content.decode()


def test_the_audit_page_filters_by_action_for_staff(staff_user, events):
    client = Client()
    client.force_login(staff_user)

    page = client.get("/audit/?action=agenda.submit").content.decode()

    assert f'data-audit-event="{events["mine"].pk}"' not in page
    assert "agenda.submit" in page


def test_past_a_select_of_customers_the_audit_page_takes_a_typed_customer(
    staff_user, admin_member, events, customer, other_customer, monkeypatch
):
    monkeypatch.setattr("audit.views.CHOICES_SHOWN", 1)
    staff, admin = Client(), Client()
    staff.force_login(staff_user)
    admin.force_login(admin_member.user)

    form = staff.get("/audit/").content.decode()
    theirs = staff.get(f"/audit/?customer={other_customer.slug}").content.decode()
    monkeypatch.setattr("audit.views.CHOICES_SHOWN", 0)
    foreign = admin.get(f"/audit/?customer={other_customer.slug}").content.decode()

    assert '<select name="customer"' not in form and "Customer (slug or id)" in form
    assert f'data-audit-event="{events["theirs"].pk}"' in theirs
    assert f'data-audit-event="{events["mine"].pk}"' not in theirs
    assert f"No customer {other_customer.slug}." in foreign
    assert f'data-audit-event="{events["theirs"].pk}"' not in foreign
