"""A reaped agenda leaves its trigger firing behind, pointing at nothing (the firing's
`agenda` has no database constraint: agendas/states/reap.py AGENDA_SIDE_ROWS)."""

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from agendas.models import Agenda
from agendas.services import agenda_abort
from scheduling import timed
from tests.triggers.sample_events import s3_event
from triggers.firing import trigger_fire
from triggers.models import TriggerFiring

pytestmark = pytest.mark.django_db


def test_a_reap_keeps_the_firing_and_clears_its_reaped_agenda(trigger, admin_member):
    with time_machine.travel(timezone.now() - timedelta(days=45), tick=False):
        outcome = trigger_fire(trigger=trigger, event=s3_event())
        agenda = Agenda.objects.get()
        agenda_abort(principal=admin_member.user, agenda=agenda)

    assert timed.agendas_reap() == 1

    firing = TriggerFiring.objects.get()
    assert firing.pk == outcome.firing.pk
    assert (firing.agenda_id, firing.status) == (None, "submitted")
    assert not Agenda.objects.exists()
