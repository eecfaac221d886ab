"""The scheduler acts as SYSTEM, by name; a missing principal is refused, never a grant."""

import pytest

from agendas.models import AgendaProgress
from agendas.services import agenda_abort
from core.principals import SYSTEM, principal_is_staff
from resourcepools.models import Membership
from resourcepools.selectors import customer_list, has_role, membership_roles

pytestmark = pytest.mark.django_db


def test_a_forgotten_principal_is_refused_and_changes_nothing(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    before = AgendaProgress.objects.get(agenda=agenda).state

    with pytest.raises(TypeError, match="SYSTEM"):
        agenda_abort(principal=None, agenda=agenda)

    assert AgendaProgress.objects.get(agenda=agenda).state == before


def test_none_is_not_staff_but_system_and_staff_are(staff_user, submitter):
    with pytest.raises(TypeError):
        principal_is_staff(None)
    assert principal_is_staff(SYSTEM) and principal_is_staff(staff_user)
    assert not principal_is_staff(submitter.user)


def test_system_holds_every_role_without_memberships(customer, other_customer):
    assert membership_roles(SYSTEM) == {}
    assert has_role(SYSTEM, other_customer.pk, Membership.Role.ADMIN)
    assert set(customer_list(principal=SYSTEM)) >= {customer, other_customer}
