"""The lanes migration on a populated database: ready, queued, executing and finished agendas
keep their states, queues and executions; every (insight, customer) with ready agendas gets an
awake lane, and the first fill after the upgrade serves them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from tests.migration_steps import migrate

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("back_to_the_latest_schema"),
]

BEFORE = [
    ("agendas", "0008_unanswered_outcome"),
    ("scheduling", "0003_queue_and_outbox_models_moved"),
    ("resourcepools", "0003_hold_customer_pause_insight"),
]
AFTER = [
    ("agendas", "0009_customer_lanes"),
    ("scheduling", "0004_insight_schedule_info_moved"),
    ("resourcepools", "0004_fair_share"),
]


def test_migrating_a_populated_database_keeps_every_agenda_and_wakes_the_ready_lanes():
    apps = migrate(BEFORE)
    try:
        now = timezone.now()
        Customer = apps.get_model("resourcepools", "Customer")
        Pool = apps.get_model("resourcepools", "ResourcePool")
        Insight = apps.get_model("resourcepools", "Insight")
        Agenda = apps.get_model("agendas", "Agenda")
        Progress = apps.get_model("agendas", "AgendaProgress")
        Execution = apps.get_model("agendas", "Execution")
        Ready = apps.get_model("agendas", "ReadyAgenda")
        Queued = apps.get_model("agendas", "QueuedAgenda")
        Info = apps.get_model("scheduling", "InsightScheduleInfo")
        owner = Customer.objects.create(name="Farm", slug="farm")
        pool = Pool.objects.create(name="farm", owner=owner)
        insight = Insight.objects.create(resource_pool=pool, name="all", is_global=True)
        Info.objects.create(insight=insight, pending_customer_ids=["x"], next_position=7)
        customers = [
            Customer.objects.create(name=f"C{n}", slug=f"c{n}", resource_pool=pool)
            for n in range(3)
        ]
        states = {}

        def agenda(customer, state):
            row = Agenda.objects.create(
                customer=customer, insight=insight, operations=[{"name": "a", "type": "noop"}]
            )
            Progress.objects.create(agenda=row, customer=customer, state=state)
            states[row.pk] = state
            return row

        for customer in customers[:2]:
            for _ in range(2):
                ready = agenda(customer, "ready")
                Ready.objects.create(
                    agenda=ready, insight=insight, customer=customer, priority=5, added_at=now
                )
        queued = agenda(customers[2], "queued")
        Queued.objects.create(
            agenda=queued, insight=insight, customer=customers[2], position=3, queued_at=now
        )
        executing = agenda(customers[2], "executing")
        Execution.objects.create(
            agenda=executing,
            customer=customers[2],
            number=1,
            insight=insight,
            lease_expires_at=now,
            started_at=now,
        )
        agenda(customers[2], "succeeded")
    finally:
        apps = migrate(AFTER)

    Progress = apps.get_model("agendas", "AgendaProgress")
    Lane = apps.get_model("agendas", "CustomerLane")
    Info = apps.get_model("agendas", "InsightScheduleInfo")
    assert dict(Progress.objects.values_list("agenda_id", "state")) == states
    assert apps.get_model("agendas", "ReadyAgenda").objects.count() == 4
    assert apps.get_model("agendas", "QueuedAgenda").objects.get().agenda_id == queued.pk
    assert apps.get_model("agendas", "Execution").objects.get().agenda_id == executing.pk
    assert set(Lane.objects.values_list("customer_id", "active", "served")) == {
        (customers[0].pk, True, 0.0),
        (customers[1].pk, True, 0.0),
    }
    info = Info.objects.get(insight_id=insight.pk)
    assert (info.next_position, info.virtual_time) == (7, 0.0)

    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
    from scheduling.fill import insight_fill  # today's code, on today's schema

    assert insight_fill(insight_id=insight.pk).moved == 4
