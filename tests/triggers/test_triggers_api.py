"""triggers/: admins write, members read, another customer's trigger is a 404; the secret is
shown on create and rotate only (docs/design.md §5.4, §10.3)."""

import pytest

from tests.factories import AgendaTemplateFactory
from tests.triggers.sample_events import s3_event
from triggers.models import Trigger, TriggerFiring

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(admin_member, api_client_for):
    return api_client_for(admin_member)


@pytest.fixture
def body(template):
    return {
        "name": "ingest-new-clips",
        "template": str(template.pk),
        "payload_mapping": {"url": "@</Records/0/s3/object/key>"},
        "filter": [{"pointer": "/Records/0/eventName", "prefix": "ObjectCreated:"}],
        "labels": {"source": "ingest"},
        "event_id_pointer": "/Records/0/s3/object/sequencer",
    }


def _state() -> list:
    return list(Trigger.objects.order_by("pk").values())


def test_an_admin_creates_a_trigger_and_sees_its_secret_once(admin_client, body):
    created = admin_client.post("/api/v1/triggers/", body, format="json")

    assert created.status_code == 201, created.json()
    answer = created.json()
    trigger = Trigger.objects.get()
    assert answer["secret"] == trigger.secret and len(trigger.secret) >= 40
    assert answer["fire_url"].endswith(f"/api/v1/triggers/{trigger.pk}/fire/")
    assert trigger.created_by.username == "acme-admin"
    listed = admin_client.get("/api/v1/triggers/").json()["results"]
    shown = admin_client.get(f"/api/v1/triggers/{trigger.pk}/").json()
    assert [row["id"] for row in listed] == [str(trigger.pk)]
    assert "secret" not in listed[0] and "secret" not in shown
    assert trigger.secret not in str(listed) + str(shown)


def test_rotating_the_secret_shows_the_new_one(admin_client, make_trigger):
    trigger = make_trigger()

    response = admin_client.post(f"/api/v1/triggers/{trigger.pk}/rotate-secret/")

    assert response.status_code == 200
    trigger.refresh_from_db()
    assert response.json()["secret"] == trigger.secret


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"payload_mapping": {"url": "@<pop.payload::/x>"}}, "payload_mapping"),
        ({"filter": [{"pointer": "no-slash", "equals": "x"}]}, "filter.0.pointer"),
        ({"filter": [{"pointer": "/a", "equals": "x", "prefix": "y"}]}, "filter.0"),
        ({"filter": [{"pointer": "/a", "equals": "x"}] * 17}, "filter"),
        ({"labels": {"bad key!": "x"}}, "labels.bad key!"),
        ({"event_id_pointer": "Records/0"}, "event_id_pointer"),
        ({"template_version": 7}, "template_version"),
        ({"name": ""}, "name"),
    ],
)
def test_a_bad_definition_is_400_naming_the_field_and_creates_nothing(
    admin_client, body, change, field
):
    response = admin_client.post("/api/v1/triggers/", {**body, **change}, format="json")

    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert _state() == []


def test_a_template_not_shared_with_the_customer_is_refused(admin_client, body, other_customer):
    foreign = AgendaTemplateFactory(customer=other_customer, name="theirs")

    response = admin_client.post(
        "/api/v1/triggers/", {**body, "template": str(foreign.pk)}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["template"])
    assert _state() == []


def test_a_duplicate_name_is_400(admin_client, body, make_trigger):
    make_trigger(name=body["name"])
    before = _state()

    response = admin_client.post("/api/v1/triggers/", body, format="json")

    assert (response.status_code, list(response.json())) == (400, ["name"])
    assert _state() == before


def test_members_read_but_only_admins_write(viewer, submitter, api_client_for, make_trigger, body):
    trigger = make_trigger()
    before = _state()

    for member in (viewer, submitter):
        client = api_client_for(member)
        assert client.get(f"/api/v1/triggers/{trigger.pk}/").status_code == 200
        assert client.get(f"/api/v1/triggers/{trigger.pk}/firings/").status_code == 200
        assert client.post("/api/v1/triggers/", body, format="json").status_code == 403
        assert (
            client.patch(
                f"/api/v1/triggers/{trigger.pk}/", {"enabled": False}, format="json"
            ).status_code
            == 403
        )
        assert client.post(f"/api/v1/triggers/{trigger.pk}/rotate-secret/").status_code == 403
        assert client.delete(f"/api/v1/triggers/{trigger.pk}/").status_code == 403
    assert _state() == before


def test_another_customers_trigger_is_a_404(
    other_customer, make_principal, api_client_for, make_trigger, fire
):
    trigger = make_trigger()
    fire(trigger, s3_event())
    outsider = api_client_for(make_principal(other_customer, "admin"))
    before = (_state(), TriggerFiring.objects.count())

    urls = [f"/api/v1/triggers/{trigger.pk}/", f"/api/v1/triggers/{trigger.pk}/firings/"]
    assert [outsider.get(url).status_code for url in urls] == [404, 404]
    assert outsider.post(f"/api/v1/triggers/{trigger.pk}/rotate-secret/").status_code == 404
    assert outsider.patch(urls[0], {"enabled": False}, format="json").status_code == 404
    assert outsider.delete(urls[0]).status_code == 404
    assert outsider.get("/api/v1/triggers/").json()["results"] == []
    assert (_state(), TriggerFiring.objects.count()) == before


def test_an_admin_changes_and_deletes_a_trigger(admin_client, make_trigger):
    trigger = make_trigger()

    changed = admin_client.patch(
        f"/api/v1/triggers/{trigger.pk}/", {"enabled": False, "labels": {"a": "b"}}, format="json"
    )
    deleted = admin_client.delete(f"/api/v1/triggers/{trigger.pk}/")

    assert changed.status_code == 200
    assert (changed.json()["enabled"], changed.json()["labels"]) == (False, {"a": "b"})
    assert "secret" not in changed.json()
    assert deleted.status_code == 204
    assert _state() == []


def test_firings_are_listed_newest_first_with_status_reason_and_agenda(admin_client, trigger, fire):
    fire(trigger, s3_event(sequencer="1"))
    fire(trigger, s3_event(sequencer="2", name="ObjectRemoved:Delete"))

    response = admin_client.get(f"/api/v1/triggers/{trigger.pk}/firings/")

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [row["status"] for row in rows] == ["skipped", "submitted"]
    assert rows[0]["reason"].startswith("/Records/0/eventName is")
    assert rows[1]["agenda"] is not None and rows[0]["agenda"] is None
    assert response.json()["count"] == 2
    assert admin_client.get(f"/api/v1/triggers/{trigger.pk}/firings/?cursor=").status_code == 400
