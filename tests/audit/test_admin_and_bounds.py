"""Admin additions, changes and deletions become audit events; details stay bounded."""

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.test import Client

from audit.models import AuditEvent
from audit.services import DETAIL_MAX_ITEMS, DETAIL_MAX_TEXT, audit_record, bounded_detail
from resourcepools.models import Customer, Membership
from tests.factories import CustomerFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(staff_user):
    client = Client(REMOTE_ADDR="192.0.2.44")
    client.force_login(staff_user)
    return client


def test_a_change_in_the_admin_records_an_admin_change_event_for_that_customer(
    staff_client, staff_user, viewer, customer
):
    membership = Membership.objects.get(user=viewer.user, customer=customer)
    before = set(AuditEvent.objects.values_list("pk", flat=True))

    response = staff_client.post(
        f"/admin/resourcepools/membership/{membership.pk}/change/",
        {"user": str(viewer.user.pk), "customer": str(customer.pk), "role": "submitter"},
    )

    assert response.status_code == 302, response.content[:2000]
    assert Membership.objects.get(pk=membership.pk).role == "submitter"
    (event,) = AuditEvent.objects.exclude(pk__in=before)
    assert (event.action, event.target_type, event.target_id, event.customer_id) == (
        "admin.change",
        "resourcepools.membership",
        str(membership.pk),
        customer.pk,
    )
    assert (event.user, event.username, event.address) == (
        staff_user,
        staff_user.username,
        "192.0.2.44",
    )
    assert event.detail["change"] == "Changed Role."


def test_a_bulk_delete_in_the_admin_records_each_deleted_row(staff_client, db):
    doomed = [CustomerFactory(), CustomerFactory()]

    response = staff_client.post(
        "/admin/resourcepools/customer/",
        {
            "action": "delete_selected",
            "_selected_action": [str(customer.pk) for customer in doomed],
            "post": "yes",
        },
    )

    assert response.status_code == 302
    assert not Customer.objects.filter(pk__in=[customer.pk for customer in doomed]).exists()
    assert LogEntry.objects.filter(action_flag=DELETION).count() == 2
    deleted = AuditEvent.objects.filter(action="admin.delete")
    assert sorted(deleted.values_list("target_id", flat=True)) == sorted(
        str(customer.pk) for customer in doomed
    )
    # The customers are gone; their events stay, no longer linked to them.
    assert set(deleted.values_list("customer_id", flat=True)) == {None}


def test_a_deleted_customers_trail_stays(customer):
    customer_id = customer.pk
    audit_record(action="customer.note", target=customer)

    customer.delete()

    (event,) = AuditEvent.objects.filter(action="customer.note")
    assert (event.customer_id, event.target_id) == (None, str(customer_id))


def test_a_detail_is_cut_to_bounded_lists_strings_and_depth():
    detail = bounded_detail(
        {
            "ids": list(range(5000)),
            "text": "x" * 5000 + "\x00",
            "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
            "odd": {3, 1, 2},
            "nan": float("nan"),
        }
    )

    assert detail["ids"] == list(range(DETAIL_MAX_ITEMS))
    assert detail["text"] == "x" * DETAIL_MAX_TEXT
    assert detail["deep"]["a"]["b"]["c"] == "{'d': {'e': 1}}"
    assert detail["odd"] == [1, 2, 3]
    assert detail["nan"] == "nan"


def test_a_huge_detail_is_stored_bounded(customer):
    event = audit_record(
        action="customer.note", target=customer, detail={"ids": list(range(10_000))}
    )

    assert len(AuditEvent.objects.get(pk=event.pk).detail["ids"]) == DETAIL_MAX_ITEMS
