"""A side effect that fails after the commit never turns the committed request into an error:
the client would retry work that was done (a bulk submit twice) or lose work leased to it."""

import logging

import pytest

from agendas import fill_nudge
from agendas.models import Agenda
from core.after_commit import after_commit
from scheduling.fill import insight_fill
from scheduling.models import QueuedAgenda

pytestmark = pytest.mark.django_db(transaction=True)


def refuse(*args):
    raise ConnectionError("the broker is gone")


@pytest.fixture
def nudges_fail(monkeypatch, settings):
    settings.POP_FILL_NUDGE = "async"
    monkeypatch.setattr(fill_nudge, "_fill_nudge_send", refuse)


def test_a_submit_whose_fill_nudge_fails_answers_201_and_keeps_its_agenda(
    nudges_fail, submitter, insight, api_client_for, caplog
):
    client = api_client_for(submitter)
    client.raise_request_exception = False

    with caplog.at_level(logging.ERROR, logger="pop.after_commit"):
        response = client.post(
            "/api/v1/agendas/", {"operations": [{"name": "a", "type": "log"}]}, format="json"
        )

    assert response.status_code == 201, response.content
    assert Agenda.objects.filter(pk=response.json()["id"]).exists()
    assert "the commit stands" in caplog.text
    assert "the broker is gone" in caplog.text


def test_a_bulk_submit_whose_fill_nudge_fails_answers_200_with_every_item(
    nudges_fail, submitter, insight, api_client_for
):
    client = api_client_for(submitter)
    client.raise_request_exception = False
    items = [
        {"operations": [{"name": "a", "type": "log"}], "idempotency_key": f"k{i}"} for i in range(5)
    ]

    response = client.post("/api/v1/agendas/bulk/", {"agendas": items}, format="json")

    assert response.status_code == 200, response.content
    assert Agenda.objects.count() == 5


def test_a_pull_whose_fill_nudge_fails_hands_out_what_it_leased(
    nudges_fail, submitter, worker, insight, submit_agenda, api_client_for, caplog
):
    for _ in range(insight.queue_size + 5):
        submit_agenda(submitter)
    insight_fill(insight_id=insight.pk)
    client = api_client_for(worker)
    client.raise_request_exception = False
    caplog.clear()

    # Leaves the queue under half full with work ready: the pull nudges a fill.
    with caplog.at_level(logging.ERROR, logger="pop.after_commit"):
        response = client.post(
            f"/api/v1/insights/{insight.pk}/pull/",
            {"count": insight.queue_size - 2, "worker": "w"},
            format="json",
        )

    assert response.status_code == 200, response.content
    assert len(response.json()["agendas"]) == insight.queue_size - 2
    assert QueuedAgenda.objects.count() == 2
    assert "the broker is gone" in caplog.text


def test_after_commit_runs_only_on_commit_and_swallows_a_failure(caplog):
    from django.db import transaction

    ran = []
    with transaction.atomic():
        after_commit(ran.append, "kept")
        after_commit(refuse)
        assert ran == []
    with pytest.raises(RuntimeError), transaction.atomic():
        after_commit(ran.append, "rolled back")
        raise RuntimeError

    assert ran == ["kept"]
    assert "refuse" in caplog.text
