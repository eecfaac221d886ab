"""Dashboard fixtures: logged-in clients, agendas brought to a state through the services."""

import os
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from agendas.models import Agenda, AgendaProgress
from agendas.services import agenda_abort, agenda_pause
from core.principals import SYSTEM
from scheduling.fill import insight_fill
from scheduling.pull import insight_pull
from scheduling.report import execution_report

# Playwright's sync API runs an event loop in the test thread; Django's async-unsafe guard
# would refuse the ORM calls the browser tests make between page actions.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(autouse=True)
def _no_fill_nudges(settings):
    # Tests move agendas explicitly (fill, pull, report); no background fill tasks.
    settings.POP_FILL_NUDGE = "off"


@pytest.fixture
def client_for(db) -> Callable[..., Client]:
    """A Django test client logged in as the principal's (or the given) user."""

    def make(principal_or_user) -> Client:
        client = Client()
        client.force_login(getattr(principal_or_user, "user", principal_or_user))
        return client

    return make


@pytest.fixture
def agenda_in_state(submit_agenda, insight) -> Callable[..., Agenda]:
    """Bring a new agenda of `principal` to `state` through the real services.

    `executing` pulls the insight's whole queue (as `worker`), so agendas already queued on
    the same insight start executing with it.
    """

    def make(principal, state: str, worker: str = "worker-1", **options) -> Agenda:
        if state == "pending":
            return submit_agenda(
                principal, run_after=timezone.now() + timedelta(hours=1), **options
            )
        if state == "failed":
            options.setdefault("max_attempts", 1)
        agenda = submit_agenda(principal, **options)
        if state == "paused":
            agenda_pause(principal=principal.user, agenda=agenda)
        elif state == "aborted":
            agenda_abort(principal=principal.user, agenda=agenda)
        elif state != "ready":
            insight_fill(insight_id=agenda.insight_id)
            if state != "queued":
                pulled = insight_pull(
                    principal=SYSTEM, insight=agenda.insight, worker=worker, count=100
                )
                (execution,) = [item.execution for item in pulled if item.agenda.pk == agenda.pk]
                if state in ("succeeded", "failed"):
                    execution_report(
                        execution_id=execution.pk, lease_token=execution.lease_token, state=state
                    )
        assert AgendaProgress.objects.get(agenda=agenda).state == state
        return agenda

    return make
