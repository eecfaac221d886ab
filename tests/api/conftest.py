"""API test fixtures: agendas in every state (reached through the services), snapshots."""

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from agendas.models import AgendaProgress, Execution
from agendas.services import agenda_abort, agenda_pause
from core.principals import SYSTEM
from core.throttling import throttle_counters_clear
from resourcepools.models import Membership
from scheduling.fill import insight_fill
from scheduling.models import CallbackDelivery, QueuedAgenda, ReadyAgenda
from scheduling.pull import insight_pull
from scheduling.report import execution_report
from tests.factories import AgendaTemplateFactory

Role = Membership.Role
AGENDA_STATES = [
    "pending_held",
    "pending_later",
    "ready",
    "queued",
    "executing",
    "paused",
    "succeeded",
    "failed",
    "aborted",
]


@pytest.fixture(autouse=True)
def fresh_throttles():
    """Throttle counters (and the cache): every test starts with none."""
    cache.clear()
    throttle_counters_clear()
    yield
    cache.clear()
    throttle_counters_clear()


@pytest.fixture
def client(submitter, insight, api_client_for):
    """The default caller: a submitter of customer Acme (whose pool has an insight), by token."""
    return api_client_for(submitter)


@pytest.fixture
def admin_client(admin_member, api_client_for):
    return api_client_for(admin_member)


@pytest.fixture
def viewer_client(viewer, api_client_for):
    return api_client_for(viewer)


@pytest.fixture
def other_client(other_submitter, api_client_for):
    return api_client_for(other_submitter)


@pytest.fixture
def staff_client(staff_user, api_client_for):
    return api_client_for(staff_user)


@pytest.fixture
def agenda_in_state(submit_agenda, insight) -> Callable:
    """Bring a new agenda of `principal` to `state` through the real services.

    `queued` fills the insight and `executing` pulls its whole queue, so agendas already
    ready on the same insight move along with it.
    """

    def make(principal, state: str, **options):
        if state == "pending_held":
            return submit_agenda(principal, do_not_run=True, **options)
        if state == "pending_later":
            later = timezone.now() + timedelta(hours=1)
            return submit_agenda(principal, run_after=later, **options)
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
                # Pulls whatever else is queued on the insight too; tests take that into account.
                pulled = insight_pull(
                    principal=SYSTEM, insight=agenda.insight, worker="w1", count=100
                )
                (execution,) = [item.execution for item in pulled if item.agenda.pk == agenda.pk]
                if state in ("succeeded", "failed"):
                    execution_report(
                        execution_id=execution.pk, lease_token=execution.lease_token, state=state
                    )
        progress = AgendaProgress.objects.get(agenda=agenda)
        assert progress.state == state.split("_")[0], progress.state
        return agenda

    return make


@pytest.fixture
def snapshot() -> Callable:
    """Everything an agenda action could change, to assert that a refusal changed nothing."""

    def take(agenda) -> tuple:
        progress = AgendaProgress.objects.get(agenda=agenda)
        return (
            progress.state,
            progress.message,
            progress.abort_requested,
            progress.pause_requested,
            progress.do_not_run,
            progress.attempts_completed,
            progress.updated_at,
            sorted(progress.operations.values_list("name", "state", "updated_at")),
            ReadyAgenda.objects.filter(agenda=agenda).exists(),
            QueuedAgenda.objects.filter(agenda=agenda).exists(),
            Execution.objects.filter(agenda=agenda).count(),
            CallbackDelivery.objects.filter(agenda=agenda).count(),
        )

    return take


@pytest.fixture
def template(customer):
    return AgendaTemplateFactory(
        customer=customer,
        name="probe-one",
        payload_schema={
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string"}},
        },
    )
