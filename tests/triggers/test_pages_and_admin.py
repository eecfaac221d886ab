"""The triggers pages (list, one trigger's firings) and the admin of triggers and firings."""

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from tests.triggers.sample_events import s3_event
from triggers.models import Trigger

pytestmark = pytest.mark.django_db


@pytest.fixture
def fired(trigger, fire):
    fire(trigger, s3_event(sequencer="1"))
    fire(trigger, s3_event(sequencer="2", name="ObjectRemoved:Delete"))
    return trigger


def test_a_member_sees_the_triggers_and_a_triggers_recent_firings(client, viewer, fired):
    client.force_login(viewer.user)

    listing = client.get("/triggers/")
    detail = client.get(f"/triggers/{fired.pk}/")

    assert listing.status_code == 200
    assert b'data-trigger="ingest-new-clips"' in listing.content
    assert b'aria-current="page">Triggers' in listing.content
    assert detail.status_code == 200
    page = detail.content.decode()
    assert page.count("data-firing=") == 2
    assert "not starting with" in page  # the skipped firing's reason
    agenda_id = fired.firings.get(status="submitted").agenda_id
    assert reverse("pages:agenda-detail", args=[agenda_id]) in page
    assert fired.secret not in page and fired.secret not in listing.content.decode()


def test_another_customers_trigger_page_is_a_404(client, other_customer, make_principal, fired):
    client.force_login(make_principal(other_customer, "admin").user)

    assert client.get(f"/triggers/{fired.pk}/").status_code == 404
    assert b"data-trigger=" not in client.get("/triggers/").content


def test_the_admin_lists_triggers_and_firings_and_checks_a_new_trigger(
    client, staff_user, fired, template
):
    client.force_login(staff_user)
    for model in ("trigger", "triggerfiring"):
        changelist = reverse(f"admin:triggers_{model}_changelist")
        assert client.get(changelist).status_code == 200
        assert client.get(changelist, {"q": str(fired.pk)}).status_code == 200
    firing = fired.firings.first()
    assert (
        client.get(reverse("admin:triggers_triggerfiring_change", args=[firing.pk])).status_code
        == 200
    )
    change = client.get(reverse("admin:triggers_trigger_change", args=[fired.pk]))
    assert change.status_code == 200 and fired.secret not in change.content.decode()

    form = {
        "name": "from-admin",
        "customer": str(fired.customer_id),
        "template": str(template.pk),
        "payload_mapping": '{"url": "@</key>"}',
        "filter": '[{"pointer": "bad", "equals": 1}]',
        "labels": "{}",
        "event_id_pointer": "",
        "enabled": "on",
        "link_id": "",
        "cid": "",
    }
    refused = client.post(reverse("admin:triggers_trigger_add"), form)
    assert refused.status_code == 200 and "filter.0.pointer" in refused.content.decode()
    assert not Trigger.objects.filter(name="from-admin").exists()

    created = client.post(reverse("admin:triggers_trigger_add"), {**form, "filter": "[]"})
    assert created.status_code == 200
    made = Trigger.objects.get(name="from-admin")
    assert made.created_by == staff_user and len(made.secret) >= 40
    assert f"<code data-trigger-secret>{made.secret}</code>" in created.content.decode()
    assert "no-store" in created["Cache-Control"]
    assert reverse("admin:triggers_trigger_change", args=[made.pk]) in created.content.decode()


def test_the_admin_never_puts_a_new_triggers_secret_in_a_message_or_cookie(
    client, staff_user, customer, template
):
    client.force_login(staff_user)
    form = {
        "name": "from-admin",
        "customer": str(customer.pk),
        "template": str(template.pk),
        "payload_mapping": "{}",
        "filter": "[]",
        "labels": "{}",
        "event_id_pointer": "",
        "enabled": "on",
        "link_id": "",
        "cid": "",
    }

    created = client.post(reverse("admin:triggers_trigger_add"), form)

    secret = Trigger.objects.get(name="from-admin").secret
    assert not any(secret in str(message) for message in get_messages(created.wsgi_request))
    assert all(secret not in morsel.value for morsel in created.cookies.values())
    assert secret not in client.get(reverse("admin:triggers_trigger_changelist")).content.decode()
