"""Generated operations (docs/design.md §6.4) survive a retry at the point of failure
(docs/design.md §4) and reruns."""

import pytest

from agendas.models import AgendaProgress, Execution, OperationProgress
from popclient.dag import DagRunner
from popclient.handlers import HandlerRegistry
from tests.scheduling.conftest import state_of

pytestmark = pytest.mark.django_db

CHUNK_1 = {
    "name": "chunk-1",
    "type": "transcode",
    "payload": {"part": 1, "url": "@<probe.out::/url>"},
    "timeout_seconds": 600,
    "params": {"generatedOperationParent": "probe"},
}
CHUNK_2 = {
    "name": "chunk-2",
    "type": "transcode",
    "payload": {"after": "@<chunk-1.out::/file>"},
    "depends_on": ["chunk-1"],
    "params": {"generatedOperationParent": "probe"},
}


def _pull_http(client, insight) -> list[dict]:
    response = client.post(
        f"/api/v1/insights/{insight.pk}/pull/", {"count": 5, "worker": "pod-1"}, format="json"
    )
    assert response.status_code == 200
    return response.json()["agendas"]


def _append(client, item: dict, operations: list) -> object:
    return client.post(
        f"/api/v1/executions/{item['execution']['id']}/operations/",
        {"operations": operations},
        format="json",
        HTTP_X_POP_LEASE=item["execution"]["lease_token"],
    )


def _fail_on_chunk_2(report, execution) -> None:
    report(
        execution,
        operations=[
            {"name": "probe", "state": "succeeded", "result": {"url": "s3://a"}},
            {"name": "chunk-1", "state": "succeeded", "result": {"file": "p1.ts"}},
            {"name": "chunk-2", "state": "executing", "params": {"job": "j-9"}},
        ],
    )
    report(
        execution,
        state="failed",
        operations=[
            {
                "name": "chunk-2",
                "state": "failed",
                "diagnostics": [{"message": "encoder crashed", "code": "E42"}],
            }
        ],
    )


def generate_then_fail(submitter, submit_agenda, insight, fill, worker, api_client_for, report):
    """Return a maker of agendas whose worker generated chunk-1 and chunk-2, then failed on
    chunk-2 (the fixture below; test_generated_operations_rerun.py uses it too)."""

    def run(**options):
        agenda = submit_agenda(submitter, retry_delay_seconds=0, **options)
        fill(insight)
        client = api_client_for(worker)
        [item] = _pull_http(client, insight)
        response = _append(client, item, [CHUNK_1, CHUNK_2])
        assert response.status_code == 201, response.json()
        _fail_on_chunk_2(report, Execution.objects.get(pk=item["execution"]["id"]))
        return agenda

    return run


failed_on_chunk_2 = pytest.fixture(generate_then_fail, name="failed_on_chunk_2")


def test_retry_pull_hands_back_generated_operations_with_their_progress(
    failed_on_chunk_2, operations, insight, fill, worker, api_client_for, report
):
    agenda = failed_on_chunk_2()
    assert state_of(agenda) == "ready"  # attempt 1 of 3 failed, no delay

    fill(insight)
    [item] = _pull_http(api_client_for(worker), insight)

    assert item["agenda"]["id"] == str(agenda.pk)
    assert item["execution"]["number"] == 2
    assert item["agenda"]["operations"] == [*operations, CHUNK_1, CHUNK_2]
    prior = {op["name"]: op for op in item["progress"]["operations"]}
    assert list(prior) == ["probe", "report", "chunk-1", "chunk-2"]
    assert (prior["chunk-1"]["state"], prior["chunk-1"]["result"]) == (
        "succeeded",
        {"file": "p1.ts"},
    )
    assert (prior["chunk-2"]["state"], prior["chunk-2"]["params"]) == ("failed", {"job": "j-9"})
    assert prior["chunk-2"]["diagnostics"][0]["message"] == "encoder crashed"
    assert prior["chunk-2"]["is_generated"] is True
    # The Python worker skips what succeeded and resumes chunk-2 with its prior params.
    runner = DagRunner(item["agenda"], registry=HandlerRegistry(), prior_progress=item["progress"])
    ops = runner.operations()
    assert (ops["chunk-1"].skipped, ops["chunk-2"].skipped) == (True, False)
    assert ops["chunk-2"].depends_on == ["chunk-1"]
    assert ops["chunk-2"].params == {"job": "j-9"}

    execution = Execution.objects.get(pk=item["execution"]["id"])
    report(
        execution,
        state="succeeded",
        operations=[
            {"name": "chunk-2", "state": "succeeded"},
            {"name": "report", "state": "succeeded"},
        ],
    )
    assert state_of(agenda) == "succeeded"
    assert AgendaProgress.objects.get(agenda=agenda).percent_complete == 100.0


def test_a_later_append_may_depend_on_earlier_generated_operations(
    submitter, run_one, insight, api_client_for, worker
):
    pulled = run_one(submitter, insight)
    item = {
        "execution": {
            "id": str(pulled.execution.pk),
            "lease_token": str(pulled.execution.lease_token),
        }
    }
    client = api_client_for(worker)

    assert _append(client, item, [CHUNK_1]).status_code == 201
    response = _append(client, item, [CHUNK_2])

    assert response.status_code == 201, response.json()
    stored = OperationProgress.objects.get(name="chunk-2")
    assert (stored.definition, stored.params, stored.position) == (CHUNK_2, {}, 3)


def _written(agenda) -> tuple:
    progress = AgendaProgress.objects.get(agenda=agenda)
    return (
        list(
            OperationProgress.objects.filter(agenda_progress=progress)
            .order_by("position")
            .values_list("name", "definition", "updated_at")
        ),
        list(Execution.objects.filter(agenda=agenda).values_list("lease_expires_at", "updated_at")),
        progress.updated_at,
    )


@pytest.mark.parametrize(
    ("appended", "expected"),
    [
        (
            [
                {"name": "a", "type": "t", "depends_on": ["nope"]},
                {"name": "b", "type": "t", "payload": {"x": "@<ghost.out>"}},
                {"name": "PROBE", "type": "mediainfo"},
                {"name": "c", "type": "t", "depends_on": ["c"]},
            ],
            {
                "operations.0.depends_on": ["Unknown operation 'nope'."],
                "operations.1.payload": [
                    "Reference @<ghost.out> names no operation of this agenda."
                ],
                "operations.2.name": ["The agenda already has an operation named 'probe'."],
                "operations.3.depends_on": ["An operation cannot depend on itself."],
            },
        ),
        (
            [{"name": "x", "type": "t"}, {"name": "X", "type": "t"}],
            {
                "operations.1.name": [
                    "Operation name 'X' is already used by operations.0.name "
                    "(names are unique case-insensitively)."
                ]
            },
        ),
        (
            [
                {"name": "x", "type": "t", "depends_on": ["y"]},
                {"name": "y", "type": "t", "payload": "@<x.out>"},
            ],
            {"operations": ["Operations form a cycle: x -> y -> x"]},
        ),
        (
            [{"name": "ok", "type": "t"}, {"name": "x", "type": "", "surprise": 1}],
            {
                "operations.1.non_field_errors": ["Unknown fields: surprise."],
            },
        ),
        ([{"name": "y", "type": "t", "timeout_seconds": 0}], None),
    ],
    ids=["unknown-names-and-clash", "duplicate", "cycle", "unknown-field", "timeout"],
)
def test_bad_appended_operations_are_400_with_field_paths_and_write_nothing(
    submitter, run_one, insight, api_client_for, worker, appended, expected
):
    pulled = run_one(submitter, insight)
    item = {
        "execution": {
            "id": str(pulled.execution.pk),
            "lease_token": str(pulled.execution.lease_token),
        }
    }
    before = _written(pulled.agenda)

    response = _append(api_client_for(worker), item, appended)

    assert response.status_code == 400
    if expected is None:
        assert set(response.json()) == {"operations.0.timeout_seconds"}
    else:
        assert response.json() == expected
    assert _written(pulled.agenda) == before


def test_repeating_a_generated_operation_with_another_definition_is_400(
    submitter, run_one, insight, api_client_for, worker
):
    pulled = run_one(submitter, insight)
    item = {
        "execution": {
            "id": str(pulled.execution.pk),
            "lease_token": str(pulled.execution.lease_token),
        }
    }
    client = api_client_for(worker)
    assert _append(client, item, [CHUNK_1]).status_code == 201
    before = _written(pulled.agenda)

    same = _append(client, item, [CHUNK_1])
    changed = _append(client, item, [{**CHUNK_1, "payload": {"part": 9}}])

    assert same.status_code == 201
    assert [op["name"] for op in same.json()["operations"]] == ["chunk-1"]
    assert changed.status_code == 400
    assert changed.json() == {
        "operations.0.name": [
            "The agenda already has an operation named 'chunk-1' "
            "(generated with another definition)."
        ]
    }
    assert _written(pulled.agenda)[0] == before[0]


def test_appending_to_a_stale_execution_is_409_and_writes_nothing(
    submitter, submit_agenda, insight, fill, pull, report, api_client_for, worker
):
    agenda = submit_agenda(submitter, retry_delay_seconds=0)
    fill(insight)
    [first] = pull(insight)
    report(first, state="failed", message="boom")
    fill(insight)
    [second] = pull(insight)
    item = {
        "execution": {
            "id": str(first.execution.pk),
            "lease_token": str(first.execution.lease_token),
        }
    }
    before = _written(agenda)

    response = _append(api_client_for(worker), item, [CHUNK_1])

    assert response.status_code == 409
    assert response.json()["current_state"] == "executing"
    assert second.execution.pk != first.execution.pk
    assert _written(agenda) == before
