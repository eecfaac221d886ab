"""Outputs (docs/design.md, "Outputs"): what an operation's result declares as
`outputs: [{path or url, kind, bytes}]` is listed by the API, on the agenda's page and in the
final callback — checked and bounded, since a worker (a customer's code) writes it."""

import pytest

from agendas.outputs import (
    MAX_OUTPUTS_PER_AGENDA,
    MAX_OUTPUTS_PER_OPERATION,
    agenda_outputs,
    output_entries,
)
from scheduling import fill as fill_service
from scheduling import report as report_service
from scheduling.models import CallbackDelivery

pytestmark = pytest.mark.django_db

VIDEO = {"path": "/media/out/clip.mp4", "kind": "video", "bytes": 52311}
PLAYLIST = {"url": "https://cdn.example.com/clip/master.m3u8", "kind": "hls"}


def finish(pulled, results: dict[str, dict], *, batch: bool = False) -> None:
    """Report every operation of `pulled` succeeded with `results`, and the agenda succeeded."""
    report = {
        "state": "succeeded",
        "operations": [
            {"name": name, "state": "succeeded", "result": result}
            for name, result in results.items()
        ],
    }
    if batch:
        answers = report_service.execution_report_batch(
            reports=[
                {
                    "execution": pulled.execution.pk,
                    "lease_token": str(pulled.execution.lease_token),
                    **report,
                }
            ]
        )
        assert [answer.status for answer in answers] == [200]
    else:
        report_service.execution_report(
            execution_id=pulled.execution.pk, lease_token=pulled.execution.lease_token, **report
        )


@pytest.fixture
def pulled_one(submitter, submit_agenda, insight, pull):
    def run(**options):
        agenda = submit_agenda(submitter, **options)
        fill_service.insight_fill(insight_id=insight.pk)
        [pulled] = pull(insight, count=1)
        assert pulled.execution.agenda_id == agenda.pk
        return pulled

    return run


def test_well_formed_entries_are_kept_and_the_rest_dropped_or_bounded():
    result = {
        "outputs": [
            VIDEO,
            PLAYLIST,
            {"kind": "video"},  # neither path nor url
            "not an object",
            {"path": "", "url": "   "},
            {"path": "/x" * 3000, "bytes": True},
            {"path": "/y", "bytes": -5, "kind": 7},
        ]
    }

    entries = output_entries(result)

    assert entries[0] == {**VIDEO, "url": None}
    assert entries[1] == {**PLAYLIST, "path": None, "bytes": None}
    assert len(entries[2]["path"]) == 2048 and entries[2]["bytes"] is None
    assert entries[3] == {"path": "/y", "url": None, "kind": None, "bytes": None}
    assert len(entries) == 4
    assert (
        output_entries({"outputs": [VIDEO] * 500})
        == [{**VIDEO, "url": None}] * MAX_OUTPUTS_PER_OPERATION
    )
    assert output_entries({"outputs": "elsewhere"}) == output_entries([VIDEO]) == []


def test_the_api_lists_what_the_operations_declared_in_operation_order(
    pulled_one, api_client_for, submitter
):
    pulled = pulled_one()
    finish(pulled, {"probe": {"outputs": [PLAYLIST]}, "report": {"outputs": [VIDEO]}})

    answer = api_client_for(submitter).get(f"/api/v1/agendas/{pulled.execution.agenda_id}/")

    assert answer.status_code == 200
    assert answer.json()["outputs"] == [
        {"operation": "probe", "path": None, "bytes": None, **PLAYLIST},
        {"operation": "report", "url": None, **VIDEO},
    ]


def test_an_agenda_without_declared_outputs_lists_none(pulled_one, api_client_for, submitter):
    pulled = pulled_one()
    finish(pulled, {"probe": {"size": 7}, "report": {"output": "/legacy/only.mp4"}})

    answer = api_client_for(submitter).get(f"/api/v1/agendas/{pulled.execution.agenda_id}/")

    assert answer.json()["outputs"] == []


@pytest.mark.parametrize("batch", [False, True], ids=["report", "batch report"])
def test_the_final_callback_carries_the_outputs(pulled_one, batch):
    pulled = pulled_one(callback_url="https://hooks.example.com/done")
    finish(pulled, {"report": {"outputs": [VIDEO]}}, batch=batch)

    bodies = {
        delivery.event: delivery.body
        for delivery in CallbackDelivery.objects.filter(agenda_id=pulled.execution.agenda_id)
    }

    assert "outputs" not in bodies["executing"]  # nothing is final yet
    assert bodies["succeeded"]["outputs"] == [{"operation": "report", "url": None, **VIDEO}]


def test_the_agenda_page_links_web_urls_only(pulled_one, client, submitter):
    pulled = pulled_one()
    finish(
        pulled,
        {
            "probe": {"outputs": [PLAYLIST]},
            "report": {"outputs": [{"url": "javascript:alert(1)", "kind": "trap"}, VIDEO]},
        },
    )
    client.force_login(submitter.user)

    page = client.get(f"/agendas/{pulled.execution.agenda_id}/").content.decode()

    assert f'href="{PLAYLIST["url"]}"' in page
    assert 'href="javascript:' not in page
    assert "javascript:alert(1)" in page  # shown as text
    assert "/media/out/clip.mp4" in page and "51.1\xa0KB" in page


def test_outputs_follow_the_operations_given(db):
    class Row:
        def __init__(self, name, result):
            self.name, self.result = name, result

    rows = [Row("b", {"outputs": [VIDEO]}), Row("a", None), Row("c", {"outputs": [PLAYLIST]})]

    assert [entry["operation"] for entry in agenda_outputs(rows)] == ["b", "c"]


def test_an_agenda_with_many_operations_lists_a_bounded_number_of_outputs(db):
    class Row:
        def __init__(self, name):
            self.name, self.result = name, {"outputs": [VIDEO] * MAX_OUTPUTS_PER_OPERATION}

    outputs = agenda_outputs(Row(f"op{n}") for n in range(100))

    assert len(outputs) == MAX_OUTPUTS_PER_AGENDA
    assert (
        outputs[-1]["operation"] == f"op{MAX_OUTPUTS_PER_AGENDA // MAX_OUTPUTS_PER_OPERATION - 1}"
    )
