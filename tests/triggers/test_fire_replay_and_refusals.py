"""The fire endpoint against replays, bodies and events it must refuse (docs/design.md §5.4):
each refusal after the signature is a recorded `refused` firing, never a 500."""

import pytest
from rest_framework.test import APIClient

from agendas.models import Agenda
from popclient.triggers import encode_event, signed_headers
from tests.factories import AgendaTemplateFactory
from tests.triggers.sample_events import s3_event
from triggers.models import Trigger, TriggerFiring
from triggers.services import trigger_create, trigger_update

pytestmark = pytest.mark.django_db


def _post(trigger, body: bytes, headers: dict[str, str]):
    """POST exactly these headers (a captured request, replayed as it was or changed)."""
    extra = {
        f"HTTP_{name.upper().replace('-', '_')}": value
        for name, value in headers.items()
        if name != "Content-Type"
    }
    return APIClient().post(
        f"/api/v1/triggers/{trigger.pk}/fire/",
        data=body,
        content_type="application/json",
        **extra,
    )


def _state() -> tuple:
    return (
        Agenda.objects.count(),
        list(TriggerFiring.objects.order_by("received_at").values_list("pk", "status")),
    )


def test_a_captured_firing_replayed_with_another_or_no_idempotency_key_is_401_and_changes_nothing(
    make_trigger, fresh_throttles
):
    trigger = make_trigger(name="keyed-only")  # no event id: the key alone de-duplicates
    body = encode_event(s3_event(key="incoming/a.mov"))
    signed = signed_headers(trigger.secret, body, idempotency_key="watch-1")
    first = _post(trigger, body, signed)
    assert first.status_code == 201
    before = _state()

    other_key = _post(trigger, body, {**signed, "Idempotency-Key": "attacker-2"})
    no_key = _post(trigger, body, {k: v for k, v in signed.items() if k != "Idempotency-Key"})

    assert (other_key.status_code, no_key.status_code) == (401, 401)
    assert "replayed" in other_key.json()["detail"]
    assert _state() == before
    assert before[0] == 1


def test_the_same_signed_request_again_with_its_key_is_a_duplicate_of_the_first_firing(
    make_trigger, fresh_throttles
):
    trigger = make_trigger(name="keyed-only")
    body = encode_event(s3_event(key="incoming/a.mov"))
    signed = signed_headers(trigger.secret, body, idempotency_key="watch-1")
    first = _post(trigger, body, signed).json()

    again = _post(trigger, body, signed)

    assert again.status_code == 200
    assert again.json() == {**first, "status": "duplicate"}
    assert (Agenda.objects.count(), TriggerFiring.objects.count()) == (1, 1)


def test_a_replayed_request_first_refused_with_another_key_is_401_and_changes_nothing(
    trigger, fresh_throttles
):
    event = s3_event(sequencer="9")
    del event["Records"][0]["s3"]["bucket"]
    body = encode_event(event)
    signed = signed_headers(trigger.secret, body, idempotency_key="k-1")
    assert _post(trigger, body, signed).status_code == 400
    before = _state()

    replayed = _post(trigger, body, {**signed, "Idempotency-Key": "k-2"})

    assert replayed.status_code == 401
    assert _state() == before


def test_a_number_too_large_for_a_double_is_400_naming_the_event_and_recorded(trigger, fire):
    body = encode_event(s3_event(sequencer="big"))[:-1] + b',"x":1e999}'

    response = fire(trigger, body)

    assert response.status_code == 400
    assert list(response.json()) == ["event"]
    assert "finite" in response.json()["event"][0]
    firing = TriggerFiring.objects.get()
    assert (firing.status, firing.agenda_id, firing.event_id) == ("refused", None, "")
    assert "Infinity" in firing.event["excerpt"]
    assert Agenda.objects.count() == 0


def test_a_pointer_with_a_superscript_digit_does_not_resolve_and_is_never_a_500(make_trigger, fire):
    by_id = make_trigger(name="sup-id", event_id_pointer="/Records/\u00b2")
    by_mapping = make_trigger(name="sup-map", payload_mapping={"url": "@</Records/\u00b2>"})

    ided = fire(by_id, s3_event(sequencer="1"))
    mapped = fire(by_mapping, {"Records": ["a"]})

    assert ided.status_code == 201
    assert TriggerFiring.objects.get(trigger=by_id).event_id == ""
    assert mapped.status_code == 400
    assert mapped.json() == {"/Records/\u00b2": ["Not found in the event."]}
    assert TriggerFiring.objects.get(trigger=by_mapping).status == "refused"


def test_a_mapping_that_would_multiply_the_event_past_the_body_limit_is_400_and_recorded(
    admin_member, customer, insight, fire, settings
):
    settings.POP_MAX_BODY_BYTES = 200_000
    template = AgendaTemplateFactory(
        customer=customer,
        name="any",
        agenda={"operations": [{"name": "p", "type": "mediainfo", "payload": "@<pop.payload>"}]},
    )
    trigger = trigger_create(
        principal=admin_member.user,
        customer=customer,
        template=template,
        name="amplifier",
        payload_mapping={f"k{n}": "@</b>" for n in range(200)},
    )

    response = fire(trigger, {"b": "x" * 100_000})

    assert response.status_code == 400
    assert list(response.json()) == ["payload_mapping"]
    assert TriggerFiring.objects.get().status == "refused"
    assert Agenda.objects.count() == 0


def test_a_mapping_with_more_than_200_references_is_400_at_save_and_creates_nothing(
    admin_member, template, api_client_for
):
    mapping = {f"k{n}": "@</b>" for n in range(201)}

    response = api_client_for(admin_member).post(
        "/api/v1/triggers/",
        {"name": "many", "template": str(template.pk), "payload_mapping": mapping},
        format="json",
    )

    assert response.status_code == 400
    assert response.json() == {"payload_mapping": ["At most 200 references (got 201)."]}
    assert not Trigger.objects.exists()


@pytest.mark.parametrize(
    ("body", "headers", "field"),
    [
        (b"[1, 2]", {}, "event"),
        (b"{not json", {}, "event"),
        (b"\xff\xfe{}", {}, "event"),
        (b'{"a": "b"}', {"Idempotency-Key": "k" * 256}, "Idempotency-Key"),
    ],
)
def test_a_signed_body_refused_before_it_is_an_event_is_400_and_recorded_with_an_excerpt(
    trigger, fresh_throttles, body, headers, field
):
    signed = {**signed_headers(trigger.secret, body), **headers}

    response = _post(trigger, body, signed)

    assert response.status_code == 400
    assert list(response.json()) == [field]
    firing = TriggerFiring.objects.get()
    assert (firing.status, firing.agenda_id, firing.idempotency_key) == ("refused", None, "")
    assert firing.event["bytes"] == len(body)
    assert firing.event["excerpt"] == body.decode("utf-8", errors="replace")
    assert field in firing.reason
    assert Agenda.objects.count() == 0


def test_a_skipped_event_runs_once_the_filter_is_fixed(trigger, fire, admin_member):
    event = s3_event(sequencer="5", key="other/clip.mov")
    trigger_update(
        principal=admin_member.user,
        trigger=trigger,
        filter=[{"pointer": "/Records/0/s3/object/key", "prefix": "incoming/"}],
    )
    skipped = fire(trigger, event, key="k-5")
    assert skipped.json()["status"] == "skipped"
    trigger_update(principal=admin_member.user, trigger=trigger, filter=[])

    again = fire(trigger, event, key="k-5")

    assert again.status_code == 201
    assert Agenda.objects.count() == 1
    statuses = list(TriggerFiring.objects.order_by("received_at").values_list("status", flat=True))
    assert statuses == ["skipped", "submitted"]


def test_a_trigger_on_a_template_unshared_since_stays_editable_and_its_firing_is_refused(
    customer, other_customer, insight, make_principal, api_client_for, fire
):
    owner = make_principal(customer, "admin")
    foreign = make_principal(other_customer, "admin")
    template = AgendaTemplateFactory(
        customer=customer,
        name="shared",
        agenda={"operations": [{"name": "p", "type": "mediainfo", "payload": {}}]},
    )
    template.allowed_customers.add(other_customer)
    client = api_client_for(foreign)
    created = client.post(
        "/api/v1/triggers/", {"name": "t", "template": str(template.pk)}, format="json"
    )
    assert created.status_code == 201
    trigger = Trigger.objects.get(pk=created.json()["id"])
    template.allowed_customers.clear()

    fired = fire(trigger, s3_event())
    renamed = client.patch(
        f"/api/v1/triggers/{trigger.pk}/",
        {"name": "t2", "filter": [], "labels": {"a": "b"}},
        format="json",
    )
    disabled = client.patch(f"/api/v1/triggers/{trigger.pk}/", {"enabled": False}, format="json")
    repinned = client.patch(
        f"/api/v1/triggers/{trigger.pk}/", {"template_version": 1}, format="json"
    )
    owner_deletes = api_client_for(owner).delete(f"/api/v1/agenda-templates/{template.pk}/")

    assert fired.status_code == 400
    assert fired.json() == {"template": ["Template shared is no longer shared with this customer."]}
    assert TriggerFiring.objects.get().status == "refused"
    assert (renamed.status_code, disabled.status_code) == (200, 200)
    assert repinned.status_code == 400 and list(repinned.json()) == ["template"]
    trigger.refresh_from_db()
    assert (trigger.name, trigger.enabled, trigger.template_version) == ("t2", False, None)
    assert owner_deletes.status_code == 409
    assert "t2" not in owner_deletes.json()["detail"]
    assert str(trigger.pk) not in owner_deletes.json()["detail"]
    assert Agenda.objects.count() == 0
