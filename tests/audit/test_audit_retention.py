"""The trail is kept for ever unless POP_AUDIT_RETENTION_DAYS says otherwise; then the hourly
reap removes the events older than that, and only those."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import audit_record
from core.principals import SYSTEM
from scheduling import tasks

pytestmark = pytest.mark.django_db


def _event(age_days: int) -> AuditEvent:
    event = audit_record(action="test.event", target=("test", str(age_days)), principal=SYSTEM)
    AuditEvent.objects.filter(pk=event.pk).update(
        created_at=timezone.now() - timedelta(days=age_days)
    )
    return event


def test_without_a_retention_every_event_stays(settings):
    settings.POP_AUDIT_RETENTION_DAYS = None
    _event(4000)

    tasks.reap()

    assert AuditEvent.objects.count() == 1


def test_with_a_retention_the_reap_removes_older_events_only(settings):
    settings.POP_AUDIT_RETENTION_DAYS = 90
    old, recent = _event(91), _event(89)

    tasks.reap()

    assert list(AuditEvent.objects.values_list("pk", flat=True)) == [recent.pk]
    assert not AuditEvent.objects.filter(pk=old.pk).exists()


def test_one_event_still_refuses_to_be_deleted():
    event = _event(1)

    with pytest.raises(ValueError, match="never deleted"):
        event.delete()
