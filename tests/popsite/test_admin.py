"""Every admin changelist, add and change page renders for the operator; the admin actions."""

import json
import re
import uuid

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.messages import get_messages
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django_q.models import Task
from django_q.tasks import async_task

from agendas.models import Agenda, AgendaProgress, AgendaTemplate
from agendas.services import agenda_abort, agenda_pause
from core.principals import SYSTEM
from popsite.demo import demo_load
from resourcepools.models import Customer, Insight
from scheduling.alerts import alerts_evaluate
from scheduling.fill import insight_fill
from scheduling.models import Alert, AlertRule, QueuedAgenda, ReadyAgenda, Schedule
from scheduling.pull import insight_pull
from triggers.firing import trigger_fire
from triggers.services import trigger_create

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _test_settings(settings):
    settings.POP_FILL_NUDGE = "off"  # the tests fill explicitly
    # demo_load sets four passwords; the production hasher costs about a second each.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def operator_client(client, staff_user):
    demo_load()
    client.force_login(staff_user)
    return client


@pytest.fixture
def every_model_has_a_row(operator_client):
    """Beyond the demo data, through the services: queued and executing agendas (executions,
    schedule info), a callback outbox row, an alert rule and its open alert; plus one row of
    each django-q model, a group, and a failed login (django-axes' attempt and failure log)."""
    acme = Customer.objects.get(slug="acme")
    acme.callback_url = "https://callbacks.example.invalid/pop"
    acme.callback_secret = "demo-secret"
    acme.save(update_fields=["callback_url", "callback_secret"])
    AlertRule.objects.create(
        customer=acme, name="acme backlog", kind=AlertRule.Kind.QUEUE_WAITING, threshold=0
    )
    trigger = trigger_create(
        principal=SYSTEM,
        customer=acme,
        template=AgendaTemplate.objects.filter(customer=acme).first(),
        name="acme drop folder",
        payload_mapping={"url": "@</path>"},
    )
    trigger_fire(trigger=trigger, event={"path": "/media/in/clip.mov"})  # a firing row
    worker = get_user_model().objects.get(username="farm-worker")
    for insight in Insight.objects.all():
        insight_fill(insight_id=insight.pk)
        insight_pull(principal=worker, insight=insight, worker="w1", count=1)
    agenda_pause(principal=SYSTEM, agenda=Agenda.objects.filter(customer=acme).first())
    alerts_evaluate()
    Group.objects.create(name="operators")
    Client().post(reverse("login"), {"username": "acme-admin", "password": "wrong"})
    call_command("pop_schedules", verbosity=0)  # django-q Schedule rows
    async_task("scheduling.tasks.promote")  # an OrmQ row: no cluster runs in the tests
    now = timezone.now()
    for success in (True, False):
        Task.objects.create(
            id=uuid.uuid4().hex,
            name=f"demo-{success}",
            func="scheduling.tasks.promote",
            started=now,
            stopped=now,
            success=success,
            result=0 if success else "Traceback: boom",
        )
    return operator_client


@pytest.mark.parametrize("model", list(admin.site._registry), ids=lambda model: model._meta.label)
def test_changelist_and_change_page_render_for_the_operator(every_model_has_a_row, model):
    client = every_model_has_a_row
    meta = model._meta
    changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
    assert client.get(changelist).status_code == 200
    assert client.get(changelist, {"q": "acme"}).status_code == 200
    instance = model._default_manager.first()
    assert instance is not None, f"no {meta.label} row to open"
    change = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[instance.pk])
    assert client.get(change).status_code == 200


def test_every_model_has_a_row_covers_the_models_the_demo_leaves_empty(every_model_has_a_row):
    empty = [m._meta.label for m in admin.site._registry if not m._default_manager.exists()]

    assert empty == []
    assert Alert.objects.filter(state=Alert.State.OPEN).exists()


def _post_action(client, url_name: str, action: str, selected: list) -> list[tuple[str, str]]:
    response = client.post(
        reverse(url_name), {"action": action, "_selected_action": selected}, follow=True
    )
    assert response.status_code == 200
    return [(message.level_tag, message.message) for message in get_messages(response.wsgi_request)]


def _states() -> dict:
    return dict(AgendaProgress.objects.values_list("agenda_id", "state"))


def test_abort_action_aborts_selected_ready_agendas(operator_client):
    selected = list(Agenda.objects.values_list("pk", flat=True)[:2])

    _post_action(operator_client, "admin:agendas_agenda_changelist", "abort_selected", selected)

    assert set(
        AgendaProgress.objects.filter(agenda_id__in=selected).values_list("state", flat=True)
    ) == {"aborted"}


def test_pause_action_pauses_selected_waiting_agendas_only(operator_client):
    selected = list(Agenda.objects.order_by("pk").values_list("pk", flat=True)[:2])
    before = _states()

    messages = _post_action(
        operator_client, "admin:agendas_agenda_changelist", "pause_selected", selected
    )

    after = _states()
    assert {after[pk] for pk in selected} == {"paused"}
    assert {pk: s for pk, s in after.items() if pk not in selected} == {
        pk: s for pk, s in before.items() if pk not in selected
    }
    assert messages == [("success", "2 agenda(s) updated.")]


def test_pause_action_refuses_a_finished_agenda_with_a_message(operator_client):
    aborted, ready = Agenda.objects.order_by("pk")[:2]
    agenda_abort(principal=SYSTEM, agenda=aborted)
    before = _states()

    messages = _post_action(
        operator_client,
        "admin:agendas_agenda_changelist",
        "pause_selected",
        [aborted.pk, ready.pk],
    )

    after = _states()
    assert after[aborted.pk] == "aborted"
    assert after[ready.pk] == "paused"
    assert {pk: s for pk, s in after.items() if pk != ready.pk} == {
        pk: s for pk, s in before.items() if pk != ready.pk
    }
    assert messages == [
        ("success", "1 agenda(s) updated."),
        ("warning", f"Agenda {aborted.pk} is aborted; cannot pause."),
    ]


def test_resume_action_makes_paused_agendas_ready_again(operator_client):
    paused = list(Agenda.objects.order_by("pk")[:2])
    for agenda in paused:
        agenda_pause(principal=SYSTEM, agenda=agenda)
    before = _states()

    messages = _post_action(
        operator_client,
        "admin:agendas_agenda_changelist",
        "resume_selected",
        [agenda.pk for agenda in paused],
    )

    after = _states()
    assert {after[agenda.pk] for agenda in paused} == {"ready"}
    assert ReadyAgenda.objects.filter(agenda__in=paused).count() == 2
    assert {pk: s for pk, s in after.items() if pk not in {a.pk for a in paused}} == {
        pk: s for pk, s in before.items() if pk not in {a.pk for a in paused}
    }
    assert messages == [("success", "2 agenda(s) updated.")]


def test_resume_action_refuses_an_agenda_that_is_not_paused(operator_client):
    ready = Agenda.objects.order_by("pk").first()
    before = _states()

    messages = _post_action(
        operator_client, "admin:agendas_agenda_changelist", "resume_selected", [ready.pk]
    )

    assert _states() == before
    assert messages == [
        (
            "warning",
            f"Agenda {ready.pk} is ready; only a paused agenda can be resumed.",
        )
    ]


def test_fill_now_moves_ready_agendas_into_the_queue(operator_client):
    insights = list(Insight.objects.order_by("name"))
    ready_before = ReadyAgenda.objects.count()
    assert ready_before > 0 and not QueuedAgenda.objects.exists()
    room = {insight.pk: insight.queue_size for insight in insights}
    waiting = dict(
        (insight.pk, ReadyAgenda.objects.filter(insight=insight).count()) for insight in insights
    )
    expected = sum(min(room[pk], waiting[pk]) for pk in room)

    messages = _post_action(
        operator_client,
        "admin:resourcepools_insight_changelist",
        "fill_now",
        [insight.pk for insight in insights],
    )

    assert expected > 0
    assert QueuedAgenda.objects.count() == expected
    assert ReadyAgenda.objects.count() == ready_before - expected
    queued = set(QueuedAgenda.objects.values_list("agenda_id", flat=True))
    assert set(
        AgendaProgress.objects.filter(agenda_id__in=queued).values_list("state", flat=True)
    ) == {"queued"}
    assert messages == [("success", f"{expected} agenda(s) queued from 2 insight(s).")]


def test_fill_now_of_an_insight_with_a_full_queue_queues_nothing(operator_client):
    insight = Insight.objects.get(name="transcode")
    insight_fill(insight_id=insight.pk)
    queued = QueuedAgenda.objects.filter(insight=insight).count()
    assert queued == insight.queue_size and ReadyAgenda.objects.filter(insight=insight).exists()

    messages = _post_action(
        operator_client, "admin:resourcepools_insight_changelist", "fill_now", [insight.pk]
    )

    assert QueuedAgenda.objects.filter(insight=insight).count() == queued
    assert messages == [("success", "0 agenda(s) queued from 1 insight(s).")]


def _schedule_form(schedule, **changes) -> dict:
    data = {
        "link_id": schedule.link_id,
        "cid": schedule.cid,
        "customer": schedule.customer_id,
        "name": schedule.name,
        "template": schedule.template_id,
        "payload": json.dumps(schedule.payload),
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "start_at_0": "",
        "start_at_1": "",
        "end_at_0": "",
        "end_at_1": "",
        "catch_up": schedule.catch_up,
        "overlap": schedule.overlap,
    }
    data.update(changes)
    return data


def test_admin_schedule_edit_checks_the_cron_and_replans_the_next_run(operator_client):
    schedule = Schedule.objects.filter(state=Schedule.State.ACTIVE).first()
    assert schedule is not None, "the demo has an active schedule"
    url = reverse("admin:scheduling_schedule_change", args=[schedule.pk])
    before = Schedule.objects.get(pk=schedule.pk)

    refused = operator_client.post(url, _schedule_form(schedule, cron="61 * * * *"))
    unchanged = Schedule.objects.get(pk=schedule.pk)
    accepted = operator_client.post(url, _schedule_form(schedule, cron="0 3 * * *", timezone="UTC"))
    changed = Schedule.objects.get(pk=schedule.pk)

    assert refused.status_code == 200  # the form again, with the error
    assert "cron" in refused.context["adminform"].form.errors
    assert (unchanged.cron, unchanged.next_run_at) == (before.cron, before.next_run_at)
    assert accepted.status_code == 302
    assert changed.cron == "0 3 * * *"
    assert changed.next_run_at > timezone.now()
    assert (changed.next_run_at.hour, changed.next_run_at.minute) == (3, 0)


@pytest.mark.parametrize(
    "url",
    [
        "/admin/resourcepools/insight/add/",
        "/admin/resourcepools/customer/add/",
        "/admin/scheduling/schedule/add/",
        "/admin/agendas/agendatemplate/add/",
    ],
)
def test_forms_open_with_what_the_row_is_and_end_with_link_id_and_cid(operator_client, url):
    page = operator_client.get(url).content.decode()

    names = re.findall(r'name="([a-z_]+)"', page.split('id="content-main"', 1)[1])
    fields = [name for name in names if name not in ("csrfmiddlewaretoken", "_save")]
    assert fields[0] != "link_id" and "cid" in fields and "link_id" in fields
    assert fields.index("link_id") > fields.index("name")
