"""docs/design.md §4: every allowed transition, and forbidden ones change nothing."""

import pytest
from django.db import transaction

from agendas import states
from agendas.models import AgendaProgress
from agendas.states import ALLOWED, InvalidTransition, S
from scheduling.models import CallbackDelivery, QueuedAgenda, ReadyAgenda

pytestmark = pytest.mark.django_db

# How to reach each state from a freshly submitted (ready) agenda, through the machine.
PATHS: dict[str, list[str]] = {
    S.READY: [],
    S.PENDING: [S.QUEUED, S.EXECUTING, S.PENDING],
    S.QUEUED: [S.QUEUED],
    S.EXECUTING: [S.QUEUED, S.EXECUTING],
    S.PAUSED: [S.PAUSED],
    S.SUCCEEDED: [S.QUEUED, S.EXECUTING, S.SUCCEEDED],
    S.FAILED: [S.QUEUED, S.EXECUTING, S.FAILED],
    S.ABORTED: [S.ABORTED],
}


def _locked(agenda) -> AgendaProgress:
    return AgendaProgress.objects.select_for_update().select_related("agenda").get(agenda=agenda)


def _reach(agenda, state: str) -> AgendaProgress:
    with transaction.atomic():
        for step in PATHS[state]:
            states.transition(_locked(agenda), step)
    return AgendaProgress.objects.get(agenda=agenda)


ALLOWED_PAIRS = [
    (source, target) for source, targets in ALLOWED.items() for target in sorted(targets)
]
FORBIDDEN_PAIRS = [
    (S.READY, S.SUCCEEDED),
    (S.READY, S.EXECUTING),
    (S.PENDING, S.EXECUTING),
    (S.QUEUED, S.SUCCEEDED),
    (S.PAUSED, S.EXECUTING),
    (S.SUCCEEDED, S.ABORTED),
    (S.FAILED, S.PAUSED),
    (S.ABORTED, S.EXECUTING),
]


@pytest.mark.parametrize(("source", "target"), ALLOWED_PAIRS)
def test_every_allowed_transition_moves_the_state(source, target, submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    progress = _reach(agenda, source)
    assert progress.state == source

    with transaction.atomic():
        states.transition(_locked(agenda), target)

    progress.refresh_from_db()
    assert progress.state == target
    has_ready_row = ReadyAgenda.objects.filter(agenda=agenda).exists()
    assert has_ready_row is (target == S.READY)
    if target in states.TERMINAL:
        assert progress.completed_at is not None
    assert QueuedAgenda.objects.filter(agenda=agenda).exists() is (target == S.QUEUED)


@pytest.mark.parametrize(("source", "target"), FORBIDDEN_PAIRS)
def test_forbidden_transition_raises_names_state_and_changes_nothing(
    source, target, submitter, submit_agenda
):
    agenda = submit_agenda(submitter, callback_url="https://hooks.example.com/pop")
    progress = _reach(agenda, source)
    ready_before = ReadyAgenda.objects.filter(agenda=agenda).count()
    queued_before = QueuedAgenda.objects.filter(agenda=agenda).count()
    outbox_before = CallbackDelivery.objects.filter(agenda=agenda).count()

    with pytest.raises(InvalidTransition) as raised, transaction.atomic():
        states.transition(_locked(agenda), target)

    assert raised.value.current_state == source
    assert f"is {source}" in str(raised.value)
    progress.refresh_from_db()
    assert progress.state == source
    assert ReadyAgenda.objects.filter(agenda=agenda).count() == ready_before
    assert QueuedAgenda.objects.filter(agenda=agenda).count() == queued_before
    assert CallbackDelivery.objects.filter(agenda=agenda).count() == outbox_before


def test_notifying_states_write_one_outbox_row_each_with_the_body(submitter, submit_agenda):
    agenda = submit_agenda(submitter, callback_url="https://hooks.example.com/pop", link_id="L1")

    _reach(agenda, S.SUCCEEDED)

    deliveries = list(CallbackDelivery.objects.filter(agenda=agenda).order_by("id"))
    assert [delivery.event for delivery in deliveries] == ["executing", "succeeded"]
    body = deliveries[-1].body
    assert body["state"] == "succeeded"
    assert body["processing_state"] == "complete"
    assert body["link_id"] == "L1"
    assert body["customer"] == "acme"
    assert deliveries[-1].url == "https://hooks.example.com/pop"


def test_no_callback_url_means_no_outbox_rows(submitter, submit_agenda):
    agenda = submit_agenda(submitter)

    _reach(agenda, S.FAILED)

    assert CallbackDelivery.objects.filter(agenda=agenda).count() == 0


def test_customer_callback_url_is_used_when_agenda_has_none(submitter, submit_agenda, customer):
    customer.callback_url = "https://customer.example.com/hook"
    customer.save()
    agenda = submit_agenda(submitter)

    _reach(agenda, S.ABORTED)

    assert list(CallbackDelivery.objects.filter(agenda=agenda).values_list("url", flat=True)) == [
        "https://customer.example.com/hook"
    ]


def test_leaving_executing_clears_the_current_execution_reference(submitter, submit_agenda):
    agenda = submit_agenda(submitter)
    progress = _reach(agenda, S.EXECUTING)
    assert progress.started_at is not None

    with transaction.atomic():
        states.transition(_locked(agenda), S.PENDING, message="retry later")

    progress.refresh_from_db()
    assert (progress.state, progress.message, progress.current_execution_id) == (
        S.PENDING,
        "retry later",
        None,
    )
