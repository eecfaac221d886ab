"""Real PostgreSQL, real threads: concurrent duplicate firings submit one agenda, and every
caller is answered with that first firing."""

import pytest
from django.db import connection

from agendas.models import Agenda
from tests.threads import all_at_once
from tests.triggers.sample_events import s3_event
from triggers.firing import trigger_fire
from triggers.models import Trigger, TriggerFiring

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="concurrency is proven on PostgreSQL"
    ),
]
RUNS = 8


def _fire(trigger_id, **options):
    trigger = Trigger.objects.select_related("customer", "template").get(pk=trigger_id)
    return trigger_fire(trigger=trigger, **options)


def test_concurrent_firings_of_one_event_id_submit_one_agenda(trigger):
    outcomes = all_at_once(RUNS, _fire, trigger_id=trigger.pk, event=s3_event(sequencer="77"))

    assert sorted(outcome.status for outcome in outcomes) == ["duplicate"] * (RUNS - 1) + [
        "submitted"
    ]
    assert len({outcome.firing.pk for outcome in outcomes}) == 1
    assert Agenda.objects.count() == 1
    assert TriggerFiring.objects.get().agenda_id == Agenda.objects.get().pk


def test_concurrent_firings_with_one_idempotency_key_submit_one_agenda(make_trigger):
    trigger = make_trigger(name="keyed")
    outcomes = all_at_once(
        RUNS, _fire, trigger_id=trigger.pk, event=s3_event(), idempotency_key="upload-9"
    )

    assert [outcome.status for outcome in outcomes].count("submitted") == 1
    assert Agenda.objects.count() == 1
    assert TriggerFiring.objects.count() == 1


def test_concurrent_copies_of_one_signed_request_with_different_keys_submit_one_agenda(
    make_trigger,
):
    trigger = make_trigger(name="signed-once")
    keys = iter([f"key-{n}" for n in range(RUNS)])

    def replay(trigger_id):
        return _fire(
            trigger_id, event=s3_event(), idempotency_key=next(keys), signature_digest="ab" * 32
        )

    outcomes = all_at_once(RUNS, replay, trigger_id=trigger.pk)

    statuses = sorted(outcome.status for outcome in outcomes)
    assert statuses == ["replayed"] * (RUNS - 1) + ["submitted"]
    assert len({outcome.firing.pk for outcome in outcomes}) == 1
    assert (Agenda.objects.count(), TriggerFiring.objects.count()) == (1, 1)
