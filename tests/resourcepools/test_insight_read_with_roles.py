"""The pull's insight read also reads the caller's roles (resourcepools/selectors.py): what it
leaves for `membership_roles` is exactly what that function's own read would give."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext

from resourcepools.models import Membership
from resourcepools.selectors import insight_visible_get, membership_roles
from resourcepools.services import customer_update

pytestmark = pytest.mark.django_db
Role = Membership.Role


def _fresh(user):
    """The user as the next request loads it: no roles read yet."""
    return get_user_model().objects.get(pk=user.pk)


def _roles_read_apart(user) -> dict:
    return membership_roles(_fresh(user))


def test_a_worker_of_the_pools_owner_gets_the_insight_and_its_roles_in_one_statement(
    insight, worker, customer
):
    Membership.objects.create(user=worker.user, customer=customer, role=Role.VIEWER)
    user = _fresh(worker.user)

    with CaptureQueriesContext(connection) as captured:
        found = insight_visible_get(principal=user, insight_id=insight.pk)
        roles = membership_roles(user)

    assert found == insight and found.resource_pool == insight.resource_pool
    assert roles == _roles_read_apart(worker.user)
    assert roles == {insight.resource_pool.owner_id: Role.WORKER, customer.pk: Role.VIEWER}
    assert len(captured.captured_queries) == (1 if connection.vendor == "postgresql" else 2)


def test_a_member_of_an_inactive_customer_holds_no_role_there(
    insight, customer, submitter, staff_user
):
    customer_update(principal=staff_user, customer=customer, is_active=False)
    user = _fresh(submitter.user)

    insight_visible_get(principal=user, insight_id=insight.pk)

    assert membership_roles(user) == {} == _roles_read_apart(submitter.user)


def test_a_user_with_no_memberships_holds_no_role(insight, db):
    user = get_user_model().objects.create_user(username="nobody", password="x")

    insight_visible_get(principal=user, insight_id=insight.pk)

    assert membership_roles(user) == {}


def test_an_unknown_insight_reads_no_roles_and_the_check_still_answers(insight, worker):
    user = _fresh(worker.user)

    assert insight_visible_get(principal=user, insight_id=insight.pk.hex[::-1]) is None
    assert membership_roles(user) == {insight.resource_pool.owner_id: Role.WORKER}
