"""Batch report written set-based (docs/design.md §6.4): the same answers and rows as one by one."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.http import Http404
from django.test.utils import CaptureQueriesContext

from agendas.models import AgendaProgress, Execution, OperationProgress
from agendas.services import agenda_abort, agenda_pause
from agendas.states import InvalidTransition
from core.errors import validation_messages
from scheduling import fill as fill_service
from scheduling import report as report_service
from scheduling.models import CallbackDelivery, QueuedAgenda, ReadyAgenda

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
# Identities differ between the two worlds; everything else must not.
IDENTITIES = {
    "id",
    "agenda_id",
    "agenda_progress_id",
    "current_execution_id",
    "lease_token",
    "link_id",
}

# role → (agenda options, what the batch item reports besides execution + lease token)
CASES: dict[str, tuple[dict, dict]] = {
    "progress": (
        {},
        {
            "message": "measuring",
            "operations": [
                {"name": "probe", "state": "succeeded", "result": {"size": 7}},
                {"name": "REPORT", "state": "executing", "percent_complete": 40},
            ],
        },
    ),
    "heartbeat": ({}, {}),
    "percent": ({}, {"percent_complete": 12.345}),
    "success": (
        {"callback_url": "https://hooks.example/done"},
        {
            "state": "succeeded",
            "operations": [
                {"name": "probe", "state": "succeeded", "params": {"at": 3}},
                {"name": "report", "state": "succeeded", "message": "ok"},
            ],
        },
    ),
    "success-abort-asked": ({"callback_url": "https://hooks.example/done"}, {"state": "succeeded"}),
    "progress-pause-asked": ({}, {"message": "still going"}),
    "wrong-lease": ({}, {"lease_token": "not-the-token", "percent_complete": 5}),
    "unknown-operation": (
        {},
        {
            "message": "x",
            "operations": [{"name": "probe", "state": "succeeded"}, {"name": "ghost"}],
        },
    ),
    "stale": ({"callback_url": "https://hooks.example/done"}, {"state": "failed"}),
    "bad-state": ({}, {"state": "done"}),
    # One by one inside the batch: a failure with the retry policy, diagnostics.
    "failure": ({"retry_delay_seconds": 0}, {"state": "failed", "message": "boom"}),
    "diagnostics": ({}, {"diagnostics": [{"message": "disk slow", "code": "W1"}]}),
}


@pytest.fixture(autouse=True)
def _deep_queue(insight):
    insight.queue_size = 30
    insight.save(update_fields=["queue_size"])


def _world(prefix, submitter, submit_agenda, insight, pull) -> dict:
    """Submit, fill and pull one agenda per case; return {role: pulled}."""
    for role, (options, _) in CASES.items():
        submit_agenda(submitter, link_id=f"{prefix}:{role}", **options)
    fill_service.insight_fill(insight_id=insight.pk)
    pulled = {item.agenda.link_id: item for item in pull(insight, count=len(CASES))}
    world = {role: pulled[f"{prefix}:{role}"] for role in CASES}
    report_service.execution_report(
        execution_id=world["stale"].execution.pk,
        lease_token=world["stale"].execution.lease_token,
        state="succeeded",
    )
    agenda_abort(principal=submitter.user, agenda=world["success-abort-asked"].agenda)
    agenda_pause(principal=submitter.user, agenda=world["progress-pause-asked"].agenda)
    return world


def _items(world: dict) -> list[dict]:
    items = [
        {
            "execution": world[role].execution.pk,
            "lease_token": str(world[role].execution.lease_token),
            **fields,
        }
        for role, (_, fields) in CASES.items()
    ]
    items.append({"execution": "00000000-0000-0000-0000-000000000001", "lease_token": "x"})
    items.append({"execution": "not-a-uuid", "lease_token": "x"})
    return items


def _one_by_one(items: list[dict]) -> list[report_service.BatchItemResult]:
    results = []
    for raw in items:
        item = dict(raw)
        execution = item.pop("execution")
        lease_token = item.pop("lease_token")
        try:
            with transaction.atomic():
                answer = report_service.execution_report(
                    execution_id=execution, lease_token=lease_token, now=T0, **item
                )
        except ValidationError as error:
            results.append(
                report_service.BatchItemResult(
                    execution, 400, detail="invalid report", errors=validation_messages(error)
                )
            )
        except PermissionDenied as error:
            results.append(report_service.BatchItemResult(execution, 403, detail=str(error)))
        except Http404 as error:
            results.append(report_service.BatchItemResult(execution, 404, detail=str(error)))
        except InvalidTransition as error:
            results.append(
                report_service.BatchItemResult(
                    execution, 409, detail=str(error), current_state=error.current_state
                )
            )
        else:
            results.append(report_service.BatchItemResult(execution, 200, answer=answer))
    return results


def _anonymous(result: report_service.BatchItemResult, world: dict) -> tuple:
    detail = result.detail
    for role, pulled in world.items():
        detail = detail.replace(str(pulled.execution.pk), f"<execution {role}>")
        detail = detail.replace(str(pulled.agenda.pk), f"<agenda {role}>")
    return (result.status, result.answer, detail, result.errors, result.current_state)


def _rows(values: dict) -> dict:
    return {key: value for key, value in values.items() if key not in IDENTITIES}


def _snapshot(pulled) -> dict:
    agenda = pulled.agenda
    progress = AgendaProgress.objects.get(agenda=agenda)
    deliveries = []
    for delivery in CallbackDelivery.objects.filter(agenda=agenda).order_by("id").values():
        body = {k: v for k, v in delivery.pop("body").items() if k not in IDENTITIES}
        deliveries.append({**_rows(delivery), "body": body})
    return {
        "progress": _rows(AgendaProgress.objects.filter(pk=progress.pk).values().get()),
        "current": progress.current_execution_id == pulled.execution.pk,
        "operations": [
            _rows(values)
            for values in OperationProgress.objects.filter(agenda_progress=progress)
            .order_by("position")
            .values()
        ],
        "executions": [
            _rows(values) for values in Execution.objects.filter(agenda=agenda).values()
        ],
        "deliveries": deliveries,
        "ready": ReadyAgenda.objects.filter(agenda=agenda).count(),
        "queued": QueuedAgenda.objects.filter(agenda=agenda).count(),
    }


def test_a_mixed_batch_answers_and_writes_exactly_as_one_by_one(
    submitter, submit_agenda, insight, pull
):
    with time_machine.travel(T0, tick=False):
        batched = _world("batch", submitter, submit_agenda, insight, pull)
        alone = _world("alone", submitter, submit_agenda, insight, pull)

        results = report_service.execution_report_batch(reports=_items(batched), now=T0)
        expected = _one_by_one(_items(alone))

    assert [_anonymous(r, batched) for r in results] == [_anonymous(r, alone) for r in expected]
    assert [r.status for r in results] == [
        200, 200, 200, 200, 200, 200, 403, 400, 409, 400, 200, 200, 404, 400,
    ]  # fmt: skip
    assert [r.answer.state for r in results if r.answer] == [
        "executing", "executing", "executing", "succeeded", "succeeded", "executing",
        "ready", "executing",
    ]  # fmt: skip
    assert results[5].answer.pause is True
    for role in CASES:
        assert _snapshot(batched[role]) == _snapshot(alone[role]), role
    success = _snapshot(batched["success"])
    assert success["progress"]["state"] == "succeeded"
    assert success["progress"]["attempts_completed"] == 1
    assert [d["event"] for d in success["deliveries"]] == ["executing", "succeeded"]
    assert [(op["state"], op["attempt_count"]) for op in success["operations"]] == [
        ("succeeded", 1),
        ("succeeded", 1),
    ]


def _pulled_many(submitter, submit_agenda, insight, pull, count: int) -> list:
    for n in range(count):
        submit_agenda(submitter, link_id=f"many:{n}", callback_url="https://hooks.example/x")
    fill_service.insight_fill(insight_id=insight.pk)
    return pull(insight, count=count)


@pytest.mark.parametrize("state", [None, "succeeded"])
def test_a_batch_of_common_reports_costs_the_same_statements_for_2_or_20_items(
    state, submitter, submit_agenda, insight, pull
):
    pulled = _pulled_many(submitter, submit_agenda, insight, pull, 22)
    counts = []
    for group in (pulled[:2], pulled[2:]):
        reports = [
            {
                "execution": item.execution.pk,
                "lease_token": str(item.execution.lease_token),
                "state": state,
                "operations": [{"name": "probe", "state": "succeeded"}],
            }
            for item in group
        ]
        with CaptureQueriesContext(connection) as queries:
            results = report_service.execution_report_batch(reports=reports)
        assert {r.status for r in results} == {200}
        counts.append(len(queries))

    assert counts[0] == counts[1]
    assert counts[1] <= 10
    expected = "executing" if state is None else "succeeded"
    assert set(AgendaProgress.objects.values_list("state", flat=True)) == {expected}


def test_a_single_report_locks_its_rows_with_one_statement(submitter, submit_agenda, insight, pull):
    [pulled] = _pulled_many(submitter, submit_agenda, insight, pull, 1)

    with CaptureQueriesContext(connection) as queries:
        report_service.execution_report(
            execution_id=pulled.execution.pk, lease_token=pulled.execution.lease_token
        )

    statements = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(statements) == 2  # lock + lease renewal
    assert "FOR UPDATE OF p, e" in statements[0]
    assert '"operations"' not in statements[0]  # not the agenda's body: only what reports need
