"""The admin reads well: forms open with what the row is and fold the bookkeeping away; an
agenda's page shows its state, its progress, its operations over several lines and a way to
the dashboard."""

import html
import json
import re

import pytest
from django.urls import reverse

from core.principals import SYSTEM
from scheduling.fill import insight_fill
from scheduling.pull import insight_pull
from scheduling.report import execution_report

pytestmark = pytest.mark.django_db

COLLAPSED = re.compile(r'<fieldset class="module aligned collapse"[^>]*>(.*?)</fieldset>', re.S)
FIELDSET = re.compile(r"<fieldset[^>]*>(.*?)</fieldset>", re.S)


@pytest.fixture
def operator_client(client, staff_user):
    client.force_login(staff_user)
    return client


@pytest.mark.parametrize(
    "url",
    [
        "/admin/resourcepools/insight/add/",
        "/admin/resourcepools/customer/add/",
        "/admin/resourcepools/resourcepool/add/",
        "/admin/scheduling/schedule/add/",
        "/admin/scheduling/alertrule/add/",
        "/admin/agendas/agendatemplate/add/",
    ],
)
def test_an_add_form_opens_with_the_name_and_folds_link_id_and_cid_into_tracking(
    operator_client, url
):
    page = operator_client.get(url).content.decode()

    first, *_ = FIELDSET.findall(page)
    (tracking,) = COLLAPSED.findall(page)
    first_field = re.search(r'name="([a-z_]+)"', first).group(1)
    assert first_field == "name"
    assert 'name="link_id"' not in first and 'name="cid"' not in first
    assert "<details><summary>" in tracking and "Tracking" in tracking
    assert 'name="link_id"' in tracking and 'name="cid"' in tracking


@pytest.fixture
def executing_agenda(submit_agenda, submitter, insight):
    """An executing agenda whose probe succeeded: one operation of two, 50 %."""
    agenda = submit_agenda(submitter, labels={"project": "spring"})
    insight_fill(insight_id=insight.pk)
    (pulled,) = insight_pull(principal=SYSTEM, insight=insight, worker="w1")
    execution_report(
        execution_id=pulled.execution.pk,
        lease_token=pulled.execution.lease_token,
        operations=[{"name": "probe", "state": "succeeded", "percent_complete": 100}],
    )
    return agenda


def readonly(page: str, field: str) -> str:
    """The text of a read-only field on an admin change page."""
    match = re.search(
        rf'<div class="form-row field-{field}">.*?<div class="readonly">(.*?)</div>', page, re.S
    )
    assert match, field
    return match.group(1)


def test_the_agenda_page_shows_state_percent_operations_and_the_dashboard_link(
    operator_client, executing_agenda
):
    url = reverse("admin:agendas_agenda_change", args=[executing_agenda.pk])

    page = operator_client.get(url).content.decode()

    assert readonly(page, "state") == "executing"
    assert readonly(page, "percent") == "50%"
    dashboard = reverse("pages:agenda-detail", kwargs={"agenda_id": executing_agenda.pk})
    assert readonly(page, "dashboard_link") == f'<a href="{dashboard}">Open on the dashboard</a>'
    operations = readonly(page, "operations_pretty")
    assert html.unescape(operations) == (
        f"<pre>{json.dumps(executing_agenda.operations, indent=2)}</pre>"
    )
    table = readonly(page, "operation_progress")
    assert "<td>probe</td><td>mediainfo</td><td>succeeded</td><td>100%</td>" in table
    assert "<td>report</td><td>log</td><td>waiting</td><td>0%</td>" in table


def test_the_agenda_list_shows_each_agendas_state_and_percent(operator_client, executing_agenda):
    page = operator_client.get(reverse("admin:agendas_agenda_changelist")).content.decode()

    assert '<td class="field-state">executing</td>' in page
    assert '<td class="field-percent">50%</td>' in page
