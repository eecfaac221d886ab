"""agendas 0028 adds `last_execution_number` without writing the rows already there: they
keep NULL (the claim numbers those agendas from their executions once), new rows start at 0."""

import uuid

import pytest
from django.db import connection

from tests.migration_steps import migrate

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("back_to_the_latest_schema"),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's own insert"),
]

BEFORE = [("agendas", "0027_pull_request_answered_once")]
AFTER = [("agendas", "0028_progress_last_execution_number")]


def _numbers() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT agenda_id, last_execution_number FROM agendas_agendaprogress")
        return {str(agenda): number for agenda, number in cursor.fetchall()}


def test_rows_older_than_the_column_keep_null_and_new_rows_start_at_zero():
    apps = migrate(BEFORE)
    Customer = apps.get_model("resourcepools", "Customer")
    Progress = apps.get_model("agendas", "AgendaProgress")
    customer = Customer.objects.create(name="Old", slug="old")
    older = uuid.uuid4()
    Progress.objects.create(agenda_id=older, customer=customer, state="succeeded")

    apps = migrate(AFTER)
    newer = uuid.uuid4()
    with connection.cursor() as cursor:  # as a set-based insert that names no such column
        cursor.execute(
            "INSERT INTO agendas_agendaprogress (id, agenda_id, customer_id, link_id, cid, "
            "created_at, updated_at, state, message, percent_complete, attempts_completed, "
            "attempts_started, do_not_run, abort_requested, pause_requested, pause_now, "
            "diagnostics) SELECT gen_random_uuid(), %s, %s, '', '', now(), now(), 'ready', '', "
            "0, 0, 0, false, false, false, false, '[]'::jsonb",
            [newer, customer.pk],
        )
    made = apps.get_model("agendas", "AgendaProgress").objects.create(
        agenda_id=uuid.uuid4(), customer_id=customer.pk, state="pending"
    )

    assert _numbers() == {str(older): None, str(newer): 0, str(made.agenda_id): 0}
