"""Callback tests: agendas driven through the services, a real receiver on 127.0.0.1."""

import pytest

from resourcepools.models import Customer
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from tests.callbacks.receiver import black_hole, http_receiver  # noqa: F401 (fixtures)

SECRET = "s3cret-for-acme"


@pytest.fixture(autouse=True)
def _callback_settings(settings):
    settings.POP_FILL_NUDGE = "off"  # tests drive fills explicitly
    settings.POP_CALLBACK_ALLOW_PRIVATE = True  # the receivers listen on 127.0.0.1
    settings.POP_CALLBACK_TIMEOUT = 2.0
    settings.POP_CALLBACK_BACKOFF_SECONDS = 10.0
    settings.POP_CALLBACK_MAX_ATTEMPTS = 8


@pytest.fixture
def calls_back_to(customer):
    """Point the customer's callbacks at `url` with its secret."""

    def point(url: str) -> Customer:
        customer.callback_url = url
        customer.callback_secret = SECRET
        customer.save(update_fields=["callback_url", "callback_secret"])
        return customer

    return point


@pytest.fixture
def start_executing(submit_agenda, insight, worker):
    """Submit, fill and pull one agenda (writes its `executing` callback); returns the pull."""

    def run(principal, **options):
        agenda = submit_agenda(principal, **options)
        fill_service.insight_fill(insight_id=insight.pk)
        insight.refresh_from_db()
        pulled = pull_service.insight_pull(principal=worker.user, insight=insight, worker="w1")
        [item] = [item for item in pulled if item.agenda.pk == agenda.pk]
        return item

    return run
