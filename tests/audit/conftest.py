"""Audit fixtures: token clients per role, a client address, a template and a schedule."""

import pytest
from django.core.cache import cache

from core.principals import SYSTEM
from core.throttling import throttle_counters_clear
from scheduling.schedule_services import schedule_create
from tests.factories import AgendaTemplateFactory

ADDRESS = "203.0.113.7"


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Throttle counters (and the cache): every test starts with none."""
    cache.clear()
    throttle_counters_clear()
    yield
    cache.clear()
    throttle_counters_clear()


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def token_client(api_client_for):
    """An API client of the principal by token ("tests"), calling from ADDRESS."""

    def make(principal):
        client = api_client_for(principal)
        client.defaults["REMOTE_ADDR"] = ADDRESS
        return client

    return make


@pytest.fixture
def template(customer):
    return AgendaTemplateFactory(
        customer=customer,
        name="probe-one",
        payload_schema={"type": "object", "properties": {"url": {"type": "string"}}},
    )


@pytest.fixture
def schedule(customer, template, insight):
    return schedule_create(
        principal=SYSTEM,
        customer=customer,
        template=template,
        name="nightly",
        cron="0 3 * * *",
        payload={"url": "s3://in/a.mp4"},
    )
