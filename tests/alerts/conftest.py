"""Alert tests: rules are reference rows (admin-managed); the measured state comes from services."""

import pytest

from scheduling import fill
from scheduling import pull as pull_service
from scheduling.models import AlertRule
from tests.callbacks.receiver import http_receiver  # noqa: F401 (fixture)

SECRET = "alert-secret"


@pytest.fixture(autouse=True)
def _alert_settings(settings):
    settings.POP_FILL_NUDGE = "off"
    settings.POP_CALLBACK_ALLOW_PRIVATE = True  # the receivers listen on 127.0.0.1
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


@pytest.fixture
def make_rule(customer):
    def make(**fields) -> AlertRule:
        fields.setdefault("customer", customer)
        fields.setdefault("name", f"rule {fields.get('kind', 'queue_waiting')}")
        fields.setdefault("kind", AlertRule.Kind.QUEUE_WAITING)
        fields.setdefault("threshold", 1)
        return AlertRule.objects.create(**fields)

    return make


@pytest.fixture
def pull_all(insight, worker):
    """Fill the insight and pull everything queued; returns the PulledAgenda list."""

    def run():
        fill.insight_fill(insight_id=insight.pk)
        insight.refresh_from_db()
        return pull_service.insight_pull(
            principal=worker.user, insight=insight, worker="w1", count=100
        )

    return run
