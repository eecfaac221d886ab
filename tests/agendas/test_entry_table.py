"""What entering a state writes is one table (`states.ENTRY`): the row path, the set-based
updates and the claim's hand-written SQL leave a progress row exactly the same."""

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from agendas import states
from agendas.models import AgendaProgress
from agendas.states import ALLOWED
from agendas.states.machine import entry_sql, entry_update
from tests.agendas.test_states import PATHS

pytestmark = pytest.mark.django_db

COMPARED = [
    "state",
    "abort_requested",
    "pause_requested",
    "started_at",
    "completed_at",
    "current_execution_id",
    "run_after",
]
PAIRS = [(source, target) for source, targets in ALLOWED.items() for target in sorted(targets)]


def _locked(agenda):
    return AgendaProgress.objects.select_for_update().select_related("agenda").get(agenda=agenda)


def _at(agenda, source, *, flags, moment):
    with transaction.atomic():
        for step in PATHS[source]:
            states.transition(_locked(agenda), step)
    # Requests outstanding at the source, so entering a state has something to clear.
    AgendaProgress.objects.filter(agenda=agenda).update(
        abort_requested=flags, pause_requested=flags, run_after=moment if flags else None
    )


def _row(agenda, before=None):
    """The compared columns; a timestamp the agenda already had is shown as "kept" (the three
    agendas reached the source state at different moments)."""
    values = AgendaProgress.objects.filter(agenda=agenda).values(*COMPARED).get()
    for name in ("started_at", "completed_at"):
        if before is not None and values[name] is not None and values[name] == before[name]:
            values[name] = "kept"
    return values


@pytest.mark.parametrize("flags", [False, True])
@pytest.mark.parametrize(("source", "target"), PAIRS)
def test_row_path_set_based_update_and_sql_enter_a_state_alike(
    source, target, flags, submitter, submit_agenda
):
    by_row, by_update, by_sql = (submit_agenda(submitter) for _ in range(3))
    moment = timezone.now()
    for agenda in (by_row, by_update, by_sql):
        _at(agenda, source, flags=flags, moment=moment)
    before = {agenda: _row(agenda) for agenda in (by_row, by_update, by_sql)}
    now = timezone.now() + timedelta(minutes=5)

    with transaction.atomic():
        states.transition(_locked(by_row), target, now=now)
    AgendaProgress.objects.filter(agenda=by_update).update(**entry_update(target, now=now))
    table = connection.ops.quote_name(AgendaProgress._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS p SET state = %(state)s, "
            f"{entry_sql(target, table='p', now_parameter='now')} WHERE p.agenda_id = %(agenda)s",
            {"state": target, "now": now, "agenda": by_sql.pk},
        )

    row = _row(by_row, before[by_row])
    assert row["state"] == target
    assert _row(by_update, before[by_update]) == row
    assert _row(by_sql, before[by_sql]) == row
