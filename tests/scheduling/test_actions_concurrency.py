"""An action on a large set while pullers keep pulling (docs/design.md §7.4): the job works in
batches, and every agenda ends where the state machine allows — aborted, or executing with its
abort requested — with the queues and executions consistent."""

import threading
import time

import pytest
from django.db import connection

from agendas.bulk_actions import agenda_action_jobs_run, agenda_action_start
from agendas.models import Agenda, AgendaActionJob, AgendaProgress, Execution
from scheduling import fill as fill_service
from scheduling import pull as pull_service
from scheduling.models import QueuedAgenda, ReadyAgenda
from tests.scheduling.conftest import clone_ready_agendas

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="threads need PostgreSQL"),
]

SET_SIZE = 5000


def test_an_abort_of_5000_agendas_by_filter_finishes_while_pullers_pull(
    submitter, submit_agenda, insight, worker
):
    insight.queue_size = 20
    insight.save()
    source = submit_agenda(submitter, link_id="flood")
    clone_ready_agendas(source, SET_SIZE - 1)
    job = agenda_action_start(
        principal=submitter.user, action="abort", selection={"filter": {"link_id": "flood"}}
    )
    stop = threading.Event()
    pulled: list[int] = []
    errors: list[BaseException] = []

    def puller(name: str) -> None:
        try:
            while not stop.is_set():
                fill_service.insight_fill(insight_id=insight.pk)
                pulled.append(
                    len(
                        pull_service.insight_pull(
                            principal=worker.user, insight=insight, worker=name, count=5
                        )
                    )
                )
                time.sleep(0.01)
        except BaseException as error:  # surfaced below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=puller, args=(f"w{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    try:
        agenda_action_jobs_run(job_id=job.pk, seconds=300)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

    assert errors == [], "\n".join(str(error) for error in errors)
    job.refresh_from_db()
    executions = Execution.objects.filter(agenda__link_id="flood")
    states = dict(
        AgendaProgress.objects.filter(agenda__link_id="flood")
        .values_list("state")
        .annotate(n=__import__("django.db.models", fromlist=["Count"]).Count("id"))
        .values_list("state", "n")
    )
    assert (job.status, job.matched, job.processed) == ("done", SET_SIZE, SET_SIZE)
    assert sum(pulled) > 0, "the pullers got nothing while the job ran"
    assert job.changed == SET_SIZE  # waiting ones aborted, executing ones asked to stop
    assert set(states) <= {"aborted", "executing"}, states
    assert states.get("executing", 0) == executions.count() == sum(pulled)
    assert not AgendaProgress.objects.filter(
        agenda__link_id="flood", state="executing", abort_requested=False
    ).exists()
    assert not ReadyAgenda.objects.filter(agenda__link_id="flood").exists()
    assert not QueuedAgenda.objects.filter(agenda__link_id="flood").exists()
    assert Agenda.objects.filter(link_id="flood").count() == SET_SIZE
    assert AgendaActionJob.objects.count() == 1
