"""Cost does not grow with unrelated firings: a trigger's firings page and the duplicate
look-up are index reads (real PostgreSQL, EXPLAIN over 20,000 firings of another trigger)."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from core.principals import SYSTEM
from tests.triggers.sample_events import s3_event
from triggers.firing import _first_firing
from triggers.models import TriggerFiring
from triggers.selectors import trigger_firings_of

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="plans are PostgreSQL's"),
]


@pytest.fixture
def busy_neighbour(make_trigger, trigger):
    """20,000 firings of another trigger of the same customer, analysed."""
    other = make_trigger(name="busy")
    start = timezone.now() - timedelta(days=1)
    TriggerFiring.objects.bulk_create(
        TriggerFiring(
            id=uuid.uuid4(),
            trigger=other,
            customer_id=other.customer_id,
            received_at=start + timedelta(seconds=n),
            idempotency_key=f"k{n}",
            event_id=f"e{n}",
            event=s3_event(sequencer=str(n)),
            status="submitted",
        )
        for n in range(20_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE triggers_triggerfiring")
    return other


def plan_of(queryset) -> str:
    sql, params = queryset.query.sql_with_params()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize("which", ["quiet", "busy"])
def test_a_triggers_firings_page_is_read_by_its_index_without_a_sort(
    which, trigger, busy_neighbour, admin_member
):
    chosen = trigger if which == "quiet" else busy_neighbour
    for principal in (SYSTEM, admin_member.user):
        page = trigger_firings_of(principal=principal, trigger=chosen)[100:200]

        plan = plan_of(page)

        assert "trigger_firing_newest" in plan, plan
        assert "Sort" not in plan and "Seq Scan" not in plan, plan


def test_the_duplicate_look_up_is_an_index_read(trigger, busy_neighbour):
    found = _first_firing(busy_neighbour, "k19999", "e5")
    assert found is not None and found.idempotency_key in ("k19999", "k5")

    plan = plan_of(
        TriggerFiring.objects.filter(trigger=busy_neighbour, idempotency_key="k1").exclude(
            status__in=["refused", "skipped"]
        )
    )

    assert "trigger_firing_key_once" in plan, plan
    assert "Seq Scan" not in plan, plan


def test_the_replay_look_up_is_an_index_read(trigger, busy_neighbour):
    plan = plan_of(TriggerFiring.objects.filter(trigger=busy_neighbour, signature_digest="ab" * 32))

    assert "trigger_firing_signature_once" in plan, plan
    assert "Seq Scan" not in plan, plan
