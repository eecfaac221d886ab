"""Shared fixtures: a pool with an insight, customers, principals per role, API clients."""

import time
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import override_settings
from rest_framework.test import APIClient

from accounts.services import token_issue
from agendas import states
from agendas.services import agenda_submit
from core.principals import SYSTEM
from resourcepools.models import Customer, Insight, Membership
from tests.factories import (
    CustomerFactory,
    InsightFactory,
    MembershipFactory,
    ResourcePoolFactory,
    UserFactory,
)

Role = Membership.Role


@pytest.fixture(scope="session", autouse=True)
def _fast_password_hashing():
    """Test users' passwords hashed at 1,000 PBKDF2 iterations (tests/hashers.py)."""
    with override_settings(
        PASSWORD_HASHERS=["tests.hashers.FastPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]
    ):
        yield


@pytest.fixture(autouse=True)
def _no_fill_nudge_thread_left():
    """No test leaves the trailing fill-nudge thread, and its database connection, behind."""
    yield
    states.fill_nudges_cancel()


@pytest.fixture(scope="session", autouse=True)
def _fills_without_pace():
    """A fill's room is `queue_size − queued` (plus a pull's appetite) in every test but the
    pace's own (tests/scheduling/test_fill_pace.py). The pace adds what pulls took since the
    previous fill scaled by the wall-clock time between the two fills, so a test that fills,
    pulls and fills again would move a number of rows that depends on how fast it ran. The
    servers the live tests start run with the default pace."""
    with override_settings(POP_FILL_PACE_SECONDS=0):
        yield


@pytest.fixture(autouse=True)
def _throttle_windows_stand_still(monkeypatch):
    """Every test's requests fall in one throttle window. The throttles count per fixed window
    (core/throttling.py), so a test of a limit whose requests straddled a window's edge counted
    them in two windows and saw no 429 (it happened on a clean clone, 2026-11-28). The clock
    the throttles read stands still mid-minute; a test that moves it sets its own."""
    from core.throttling import WindowCountThrottle

    frozen = time.time() // 60 * 60 + 30
    monkeypatch.setattr(WindowCountThrottle, "timer", staticmethod(lambda: frozen))


@dataclass
class Principal:
    """A user acting for one customer with one role."""

    user: object
    customer: Customer
    role: str


@pytest.fixture
def pool_owner(db) -> Customer:
    return CustomerFactory(slug="farmco", name="FarmCo")


@pytest.fixture
def pool(pool_owner):
    return ResourcePoolFactory(name="farm", owner=pool_owner)


@pytest.fixture
def insight(pool) -> Insight:
    return InsightFactory(
        resource_pool=pool, name="mediainfo", mappers={"operation_type": ["mediainfo", "log"]}
    )


@pytest.fixture
def transcode_insight(pool) -> Insight:
    return InsightFactory(
        resource_pool=pool,
        name="transcode",
        order=1,
        mappers={"operation_type": ["transcode", "sleep"]},
    )


@pytest.fixture
def customer(pool) -> Customer:
    return CustomerFactory(slug="acme", name="Acme", resource_pool=pool)


@pytest.fixture
def other_customer(pool) -> Customer:
    return CustomerFactory(slug="globex", name="Globex", resource_pool=pool)


@pytest.fixture
def make_principal(db):
    def make(customer: Customer, role: str = Role.SUBMITTER, username: str | None = None):
        user = UserFactory(username=username or f"{customer.slug}-{role}")
        MembershipFactory(user=user, customer=customer, role=role)
        return Principal(user=user, customer=customer, role=role)

    return make


@pytest.fixture
def submitter(customer, make_principal) -> Principal:
    return make_principal(customer, Role.SUBMITTER)


@pytest.fixture
def viewer(customer, make_principal) -> Principal:
    return make_principal(customer, Role.VIEWER)


@pytest.fixture
def admin_member(customer, make_principal) -> Principal:
    return make_principal(customer, Role.ADMIN)


@pytest.fixture
def other_submitter(other_customer, make_principal) -> Principal:
    return make_principal(other_customer, Role.SUBMITTER)


@pytest.fixture
def worker(pool_owner, make_principal) -> Principal:
    return make_principal(pool_owner, Role.WORKER)


@pytest.fixture
def staff_user(db):
    return UserFactory(username="operator", is_staff=True, is_superuser=True)


@pytest.fixture
def operations() -> list[dict]:
    return [
        {"name": "probe", "type": "mediainfo", "payload": {"url": "s3://in/a.mp4"}},
        {"name": "report", "type": "log", "payload": {"size": "@<probe.out::/size>"}},
    ]


@pytest.fixture
def submit_agenda(operations, insight):
    """Submit an agenda through the service, as `principal`."""

    def submit(principal: Principal, **options):
        options.setdefault("operations", operations)
        agenda, _ = agenda_submit(principal=principal.user, customer=principal.customer, **options)
        return agenda

    return submit


@pytest.fixture
def api_client_for(db):
    """An APIClient authenticated with a token of the principal (or user), one per user."""
    keys: dict = {}

    def client_for(principal_or_user) -> APIClient:
        user = getattr(principal_or_user, "user", principal_or_user)
        if user.pk not in keys:
            keys[user.pk] = token_issue(principal=SYSTEM, user=user, name="tests").key
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {keys[user.pk]}")
        return client

    return client_for


@pytest.fixture
def back_to_the_latest_schema():
    """After a migration test (tests/migration_steps.py), the test database as every other
    test expects it, whatever happened."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
