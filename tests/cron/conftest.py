"""Cron tests: schedules created through the schedule services, run by the cron pass."""

import pytest

from agendas.models import Agenda
from scheduling.schedule_services import schedule_create
from tests.factories import AgendaTemplateFactory


@pytest.fixture(autouse=True)
def _cron_settings(settings):
    settings.POP_FILL_NUDGE = "off"
    settings.POP_CRON_INTERVAL = 10.0
    settings.POP_CRON_MISFIRE_GRACE_SECONDS = 60


@pytest.fixture
def template(customer, insight):
    return AgendaTemplateFactory(customer=customer, name="probe-url")


@pytest.fixture
def make_schedule(admin_member, template):
    """Create a schedule as the customer's admin (hourly, UTC, by default)."""

    def make(**fields):
        fields.setdefault("name", "hourly probe")
        fields.setdefault("cron", "0 * * * *")
        fields.setdefault("timezone", "UTC")
        fields.setdefault("payload", {"url": "s3://in/daily.mp4"})
        return schedule_create(
            principal=admin_member.user,
            customer=admin_member.customer,
            template=template,
            **fields,
        )

    return make


def runs_of(schedule) -> list[Agenda]:
    return list(Agenda.objects.filter(schedule=schedule).order_by("created_at"))
