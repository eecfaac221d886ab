"""triggers/{id}/fire/: the signed protocol (docs/design.md §5.4) end to end through the API."""

import time

import pytest
import time_machine

from agendas.models import Agenda
from audit.models import AuditEvent
from tests.triggers.sample_events import s3_event
from triggers.models import TriggerFiring
from triggers.services import trigger_rotate_secret, trigger_update

pytestmark = pytest.mark.django_db


def _nothing(trigger) -> tuple:
    return (Agenda.objects.count(), TriggerFiring.objects.filter(trigger=trigger).count())


def test_a_signed_firing_submits_one_agenda_with_the_mapped_payload_and_labels(trigger, fire):
    response = fire(trigger, s3_event(key="incoming/a.mov"))

    assert response.status_code == 201, response.json()
    body = response.json()
    agenda = Agenda.objects.get()
    assert body == {"status": "submitted", "firing": body["firing"], "agenda": str(agenda.pk)}
    assert agenda.customer_id == trigger.customer_id
    assert agenda.operations[0]["payload"] == {"url": "s3://ingest/incoming/a.mov"}
    assert agenda.labels == {"source": "ingest-bucket"}
    assert agenda.template_id == trigger.template_id
    firing = TriggerFiring.objects.get()
    assert (str(firing.pk), firing.status, firing.agenda_id) == (
        body["firing"],
        "submitted",
        agenda.pk,
    )
    assert firing.event_id == "0001"
    assert firing.event == s3_event(key="incoming/a.mov")
    fired = AuditEvent.objects.get(action="trigger.fire")
    assert (fired.username, fired.target_id) == ("system", str(trigger.pk))


def test_a_badly_signed_firing_is_401_and_changes_nothing(trigger, fire):
    before = _nothing(trigger)

    wrong_secret = fire(trigger, s3_event(), secret="not-the-secret")
    no_signature = fire(trigger, s3_event(), headers={"HTTP_X_POP_SIGNATURE": ""})
    bad_timestamp = fire(trigger, s3_event(), headers={"HTTP_X_POP_TIMESTAMP": "soon"})

    assert [r.status_code for r in (wrong_secret, no_signature, bad_timestamp)] == [401] * 3
    assert "X-POP-Signature" in wrong_secret.json()["detail"]
    assert _nothing(trigger) == before == (0, 0)


def test_a_replayed_firing_older_than_five_minutes_is_401_and_changes_nothing(trigger, fire):
    replayed = fire(trigger, s3_event(), now=time.time() - 301)
    # The header carries whole seconds (cut, not rounded): 302 s ahead stays more than 300
    # ahead of the server's clock when it reads it (301 did not, now and then).
    from_the_future = fire(trigger, s3_event(), now=time.time() + 302)

    assert (replayed.status_code, from_the_future.status_code) == (401, 401)
    assert "300 s" in replayed.json()["detail"]
    assert _nothing(trigger) == (0, 0)


def test_a_body_changed_after_signing_is_401(trigger, fire):
    from popclient.triggers import encode_event, signed_headers

    signed = signed_headers(trigger.secret, encode_event(s3_event(key="incoming/a.mov")))
    response = fire(
        trigger,
        s3_event(key="incoming/other.mov"),
        headers={
            "HTTP_X_POP_SIGNATURE": signed["X-POP-Signature"],
            "HTTP_X_POP_TIMESTAMP": signed["X-POP-Timestamp"],
        },
    )

    assert response.status_code == 401
    assert _nothing(trigger) == (0, 0)


def test_an_old_secret_stops_working_once_rotated(trigger, fire, admin_member):
    old = trigger.secret
    rotated = trigger_rotate_secret(principal=admin_member.user, trigger=trigger)

    assert fire(trigger, s3_event(), secret=old).status_code == 401
    assert fire(rotated, s3_event()).status_code == 201


def test_a_repeated_event_id_or_idempotency_key_answers_the_first_firing(trigger, fire):
    first = fire(trigger, s3_event(sequencer="7")).json()
    again = fire(trigger, s3_event(sequencer="7"))
    keyed = fire(trigger, s3_event(sequencer="8"), key="upload-1").json()
    keyed_again = fire(trigger, s3_event(sequencer="9"), key="upload-1")

    assert again.status_code == 200
    assert again.json() == {**first, "status": "duplicate"}
    assert keyed_again.status_code == 200
    assert keyed_again.json() == {**keyed, "status": "duplicate"}
    assert (Agenda.objects.count(), TriggerFiring.objects.count()) == (2, 2)


def test_two_hundred_firings_with_twenty_duplicate_event_ids_make_180_agendas(trigger, fire):
    sequencers = [f"{n:04d}" for n in range(180)] + [f"{n:04d}" for n in range(0, 180, 9)]
    assert len(sequencers) == 200

    answers = [fire(trigger, s3_event(key=f"incoming/{s}.mov", sequencer=s)) for s in sequencers]

    codes = [answer.status_code for answer in answers]
    assert (codes.count(201), codes.count(200)) == (180, 20)
    assert {answer.json()["status"] for answer in answers[180:]} == {"duplicate"}
    assert Agenda.objects.filter(customer=trigger.customer).count() == 180
    assert TriggerFiring.objects.filter(trigger=trigger).count() == 180


def test_a_filter_miss_is_200_skipped_and_recorded_without_an_agenda(trigger, fire):
    response = fire(trigger, s3_event(name="ObjectRemoved:Delete"))

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "skipped"
    assert body["reason"] == (
        '/Records/0/eventName is "ObjectRemoved:Delete", not starting with "ObjectCreated:".'
    )
    firing = TriggerFiring.objects.get()
    assert (firing.status, firing.agenda_id, str(firing.pk)) == ("skipped", None, body["firing"])
    assert not Agenda.objects.exists()


def test_a_mapping_pointer_the_event_lacks_is_400_naming_it_and_recorded(trigger, fire):
    event = s3_event()
    del event["Records"][0]["s3"]["bucket"]

    response = fire(trigger, event)

    assert response.status_code == 400
    assert response.json() == {"/Records/0/s3/bucket/name": ["Not found in the event."]}
    firing = TriggerFiring.objects.get()
    assert firing.status == "refused"
    assert firing.reason == "/Records/0/s3/bucket/name: Not found in the event."
    assert not Agenda.objects.exists()


def test_a_refused_event_can_be_sent_again_once_the_trigger_is_fixed(trigger, fire, admin_member):
    event = s3_event(sequencer="42")
    del event["Records"][0]["s3"]["bucket"]
    refused = fire(trigger, event, key="k-42")
    assert refused.status_code == 400
    trigger_update(
        principal=admin_member.user, trigger=trigger, payload_mapping={"url": "s3://x/y"}
    )

    again = fire(trigger, event, key="k-42")

    assert again.status_code == 201
    assert Agenda.objects.get().operations[0]["payload"] == {"url": "s3://x/y"}


def test_a_payload_the_template_schema_refuses_is_400_and_recorded(make_trigger, fire):
    trigger = make_trigger(payload_mapping={"url": "@</Records/0/s3/object/size?>"})

    response = fire(trigger, s3_event())

    assert response.status_code == 400
    assert list(response.json()) == ["payload.url"]
    assert TriggerFiring.objects.get().status == "refused"
    assert not Agenda.objects.exists()


def test_an_unknown_disabled_or_malformed_trigger_id_is_404(trigger, fire, admin_member):
    trigger_update(principal=admin_member.user, trigger=trigger, enabled=False)

    disabled = fire(trigger, s3_event())
    trigger.pk = "00000000-0000-4000-8000-000000000000"
    unknown = fire(trigger, s3_event())
    trigger.pk = "not-an-id"
    malformed = fire(trigger, s3_event())

    assert [r.status_code for r in (disabled, unknown, malformed)] == [404, 404, 404]
    assert (Agenda.objects.count(), TriggerFiring.objects.count()) == (0, 0)


def test_a_body_that_is_not_a_json_object_is_400_naming_the_event(trigger, fire):
    assert fire(trigger, b"[1, 2]").json() == {"event": ["Expected a JSON object."]}
    assert fire(trigger, b"{not json").json() == {"event": ["The body is not JSON."]}
    assert fire(trigger, b"{not json").status_code == 400


def test_a_body_over_the_size_limit_is_413(trigger, fire, settings):
    settings.POP_MAX_BODY_BYTES = 1000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = fire(trigger, {"padding": "x" * 2000})

    assert response.status_code == 413
    assert TriggerFiring.objects.count() == 0


def test_an_event_with_a_nul_character_is_refused_and_recorded_as_escaped_text(trigger, fire):
    response = fire(trigger, {**s3_event(), "note": "a\u0000b"})

    assert response.status_code == 400
    assert list(response.json()) == ["event"]
    firing = TriggerFiring.objects.get()
    assert firing.status == "refused"
    assert "\\u0000" in firing.event["excerpt"]


def test_a_large_event_is_stored_as_a_bounded_excerpt(trigger, fire, settings):
    settings.POP_TRIGGER_EVENT_EXCERPT_BYTES = 200

    response = fire(trigger, {**s3_event(), "padding": "x" * 5000})

    assert response.status_code == 201
    firing = TriggerFiring.objects.get()
    assert firing.event_truncated
    assert len(firing.event["excerpt"].encode()) <= 200
    assert firing.event["bytes"] > 5000


def test_a_trigger_keeps_only_its_newest_firings_once_their_signatures_expire(
    trigger, fire, settings
):
    settings.POP_TRIGGER_FIRINGS_KEPT = 5
    start = time.time()

    for n in range(8):
        # Ten minutes apart: each signature has expired before the next firing prunes.
        with time_machine.travel(start + n * 601, tick=False):
            assert fire(trigger, s3_event(sequencer=str(n))).status_code == 201

    kept = TriggerFiring.objects.filter(trigger=trigger).order_by("received_at")
    assert [firing.event_id for firing in kept] == ["3", "4", "5", "6", "7"]
    assert Agenda.objects.count() == 8  # the agendas stay


def test_the_firings_cap_never_prunes_a_firing_whose_signature_may_still_be_valid(
    trigger, fire, settings
):
    settings.POP_TRIGGER_FIRINGS_KEPT = 2
    start = time.time()
    with time_machine.travel(start - 700, tick=False):
        assert fire(trigger, s3_event(sequencer="old")).status_code == 201

    for n in range(4):
        assert fire(trigger, s3_event(sequencer=str(n))).status_code == 201

    kept = TriggerFiring.objects.filter(trigger=trigger).order_by("received_at")
    assert [firing.event_id for firing in kept] == ["0", "1", "2", "3"]


def test_firing_is_throttled_per_trigger_with_429(trigger, fire, monkeypatch):
    from triggers.api.views import TriggerFireThrottle

    monkeypatch.setitem(TriggerFireThrottle.THROTTLE_RATES, "trigger_fire", "2/minute")

    codes = [fire(trigger, s3_event(sequencer=str(n))).status_code for n in range(3)]

    assert codes == [201, 201, 429]
    assert Agenda.objects.count() == 2


def test_unsigned_requests_do_not_spend_a_triggers_budget(trigger, fire, monkeypatch):
    from triggers.api.views import TriggerFireThrottle

    monkeypatch.setitem(TriggerFireThrottle.THROTTLE_RATES, "trigger_fire", "2/minute")

    forged = [fire(trigger, s3_event(), secret="guess").status_code for _ in range(5)]
    signed = [fire(trigger, s3_event(sequencer=str(n))).status_code for n in range(2)]

    assert (forged, signed) == ([401] * 5, [201, 201])


def test_firing_is_throttled_per_client_address_across_triggers(make_trigger, fire, monkeypatch):
    from triggers.api.views import TriggerFireAddressThrottle

    monkeypatch.setitem(
        TriggerFireAddressThrottle.THROTTLE_RATES, "trigger_fire_address", "3/minute"
    )
    first, second = make_trigger(name="one"), make_trigger(name="two")

    codes = [fire(t, s3_event(sequencer=str(n))).status_code for n, t in
             enumerate([first, second, first, second])]  # fmt: skip

    assert codes == [201, 201, 201, 429]
    assert Agenda.objects.count() == 3


def test_an_event_nested_deeper_than_the_limit_is_400_and_recorded_as_refused(trigger, fire):
    deep = b'{"a":' * 800 + b"1" + b"}" * 800

    response = fire(trigger, deep)

    assert response.status_code == 400
    assert list(response.json()) == ["event"]
    firing = TriggerFiring.objects.get()
    assert (firing.status, firing.agenda_id) == ("refused", None)
    assert firing.event == {"excerpt": deep.decode()[:4096], "bytes": len(deep)}
    assert firing.event_truncated is True
    assert Agenda.objects.count() == 0


def test_deleting_an_agenda_keeps_its_firing_without_the_link(trigger, fire):
    fire(trigger, s3_event())

    Agenda.objects.all().delete()  # as the reaper does, through Django's collector

    firing = TriggerFiring.objects.get()
    assert (firing.status, firing.agenda_id) == ("submitted", None)
