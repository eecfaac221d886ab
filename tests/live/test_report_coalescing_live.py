"""Reports are sparse (docs/design.md §6.4): an operation that starts and finishes between two
reports
arrives as `succeeded` only (the worker coalesces its changes; an instant `echo` does). The
server must still record that it ran once, and when."""

import pytest

from popclient.client import PopClient

pytestmark = pytest.mark.django_db


def test_an_operation_reported_straight_to_succeeded_counts_one_attempt_with_timings(tenant):
    client = tenant.client()
    agenda = client.submit_agenda(
        {"operations": [{"name": "quick", "type": "echo"}, {"name": "slow", "type": "sleep"}]}
    )
    with PopClient(tenant.url, tenant.worker_token) as puller:
        [item] = puller.pull(tenant.insight_id, count=1, worker="sparse", wait_seconds=5)
        execution = item["execution"]
        # `slow` is reported running, then done; `quick` only once, already done.
        puller.report(
            execution["id"],
            execution["lease_token"],
            operations=[{"name": "slow", "state": "executing", "percent_complete": 10}],
        )
        puller.report(
            execution["id"],
            execution["lease_token"],
            operations=[
                {"name": "quick", "state": "succeeded", "result": {"echo": True}},
                {"name": "slow", "state": "succeeded", "result": {"slept_seconds": 1}},
            ],
            state="succeeded",
        )
    agenda = tenant.agenda(agenda["id"])
    assert agenda["state"] == "succeeded"
    operations = {op["name"]: op for op in agenda["progress"]["operations"]}
    assert operations["slow"]["attempt_count"] == 1
    assert operations["slow"]["started_at"] is not None
    assert operations["quick"]["result"] == {"echo": True}
    assert operations["quick"]["attempt_count"] == 1  # it ran once, like `slow`
    assert operations["quick"]["started_at"] is not None
    assert operations["quick"]["started_at"] <= operations["quick"]["completed_at"]
