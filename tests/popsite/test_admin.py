"""Every admin changelist, add and change page renders for the operator."""

import pytest
from django.contrib import admin
from django.urls import reverse

from popsite.demo import demo_load

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_client(client, staff_user):
    demo_load()
    client.force_login(staff_user)
    return client


@pytest.mark.parametrize("model", list(admin.site._registry), ids=lambda model: model._meta.label)
def test_changelist_and_change_page_render_for_the_operator(operator_client, model):
    meta = model._meta
    changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    assert operator_client.get(changelist).status_code == 200
    assert operator_client.get(changelist, {"q": "acme"}).status_code == 200
    instance = model._default_manager.first()
    if instance is not None:
        change = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[instance.pk])
        assert operator_client.get(change).status_code == 200


def test_abort_action_aborts_selected_ready_agendas(operator_client):
    from agendas.models import Agenda, AgendaProgress

    selected = list(Agenda.objects.values_list("pk", flat=True)[:2])

    response = operator_client.post(
        reverse("admin:agendas_agenda_changelist"),
        {"action": "abort_selected", "_selected_action": selected},
        follow=True,
    )

    assert response.status_code == 200
    assert set(
        AgendaProgress.objects.filter(agenda_id__in=selected).values_list("state", flat=True)
    ) == {"aborted"}
