"""Trigger fixtures: a template taking a `path`, a trigger made through the service, and a
client that fires it signed the way popclient (and `pop watch`) does."""

from collections.abc import Callable

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from core.throttling import throttle_counters_clear
from popclient.triggers import encode_event, signed_headers
from tests.factories import AgendaTemplateFactory
from triggers.models import Trigger
from triggers.services import trigger_create


@pytest.fixture
def fresh_throttles(db):
    """Throttle counters (and the cache): every test starts with none."""
    cache.clear()
    throttle_counters_clear()
    yield
    cache.clear()
    throttle_counters_clear()


@pytest.fixture
def template(customer, insight):
    return AgendaTemplateFactory(
        customer=customer,
        name="ingest",
        agenda={
            "operations": [
                {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}}
            ]
        },
        payload_schema={
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string"}},
        },
    )


@pytest.fixture
def make_trigger(admin_member, template) -> Callable[..., Trigger]:
    def make(**fields) -> Trigger:
        fields.setdefault("name", "ingest-new-clips")
        fields.setdefault(
            "payload_mapping",
            {"url": "s3://@</Records/0/s3/bucket/name>/@</Records/0/s3/object/key>"},
        )
        fields.setdefault("labels", {"source": "ingest-bucket"})
        return trigger_create(
            principal=admin_member.user, customer=admin_member.customer, template=template, **fields
        )

    return make


@pytest.fixture
def trigger(make_trigger) -> Trigger:
    return make_trigger(
        filter=[{"pointer": "/Records/0/eventName", "prefix": "ObjectCreated:"}],
        event_id_pointer="/Records/0/s3/object/sequencer",
    )


@pytest.fixture
def fire(fresh_throttles) -> Callable:
    """POST `event` to the trigger's fire endpoint, signed with `secret` (default: its own)."""
    client = APIClient()

    def post(trigger: Trigger, event, *, secret=None, now=None, key=None, headers=None):
        body = event if isinstance(event, bytes) else encode_event(event)
        signed = signed_headers(secret or trigger.secret, body, now=now, idempotency_key=key)
        signed.pop("Content-Type")
        extra = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in signed.items()}
        extra.update(headers or {})
        return client.post(
            f"/api/v1/triggers/{trigger.pk}/fire/",
            data=body,
            content_type="application/json",
            **extra,
        )

    return post
