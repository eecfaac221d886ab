"""The API docs: tags in the order a user meets them, and request examples that are real bodies
the API accepts as they stand (not generated `"payload": "string"` placeholders)."""

import json

import pytest
import yaml
from django.core.management import call_command

from popsite.demo import PACKAGE_SCHEMA, PACKAGE_TEMPLATE
from resourcepools.models import Insight
from scheduling.fill import insight_fill
from tests.factories import AgendaTemplateFactory, InsightFactory

pytestmark = pytest.mark.django_db

EXAMPLED = {
    "submit": ("/api/v1/agendas/", "post"),
    "bulk": ("/api/v1/agendas/bulk/", "post"),
    "template run": ("/api/v1/agenda-templates/{id}/run/", "post"),
    "pull": ("/api/v1/insights/{id}/pull/", "post"),
    "report": ("/api/v1/executions/{id}/report/", "post"),
    "batch report": ("/api/v1/executions/report/", "post"),
}


@pytest.fixture(scope="module")
def schema(tmp_path_factory, django_db_blocker) -> dict:
    target = tmp_path_factory.mktemp("schema") / "schema.yaml"
    with django_db_blocker.unblock():
        call_command("spectacular", "--file", str(target))
    return yaml.safe_load(target.read_text())


def examples(schema: dict, what: str) -> dict[str, dict]:
    """The request examples of one operation, by name."""
    path, method = EXAMPLED[what]
    body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]
    return body.get("examples", {})


def example(schema: dict, what: str, name: str) -> dict:
    return examples(schema, what)[name]["value"]


def test_the_docs_list_the_tags_as_a_user_meets_them_agendas_first(schema):
    listed = [tag["name"] for tag in schema["tags"]]
    used = {tag for path in schema["paths"].values() for op in path.values() for tag in op["tags"]}

    assert listed[:5] == ["agendas", "templates", "progress", "schedules", "pullers"]
    assert set(listed) == used  # no tag of an operation is left out of the order
    assert all(tag.get("description") for tag in schema["tags"])


@pytest.mark.parametrize("what", list(EXAMPLED))
def test_submit_bulk_run_pull_and_report_each_show_a_named_real_example(schema, what):
    named = examples(schema, what)

    assert named, f"{what} has no request example"
    for entry in named.values():
        assert entry["summary"]
        text = json.dumps(entry["value"])
        assert '"string"' not in text


def test_the_submit_example_is_a_media_agenda_with_a_payload_labels_and_a_priority(schema):
    body = example(schema, "submit", "ProbeAndTranscode")

    assert [(op["name"], op["type"]) for op in body["operations"]] == [
        ("probe", "mediainfo"),
        ("transcode", "transcode"),
    ]
    assert body["operations"][0]["payload"] == {"input": "/media/in/clip.mov"}
    assert body["labels"] and body["priority"] == 7


@pytest.fixture
def demo_farm(pool) -> dict[str, Insight]:
    """The demo's two insights: transcode (tried first) also takes agendas that probe."""
    return {
        "transcode": InsightFactory(
            resource_pool=pool,
            name="transcode",
            order=0,
            mappers={"operation_type": ["transcode", "thumbnail", "sleep", "package"]},
        ),
        "mediainfo": InsightFactory(
            resource_pool=pool, name="mediainfo", order=1, mappers={"operation_type": ["mediainfo"]}
        ),
    }


def test_the_submit_bulk_and_template_run_examples_are_accepted_as_they_stand(
    schema, demo_farm, submitter, customer, api_client_for
):
    client = api_client_for(submitter)
    template = AgendaTemplateFactory(
        customer=customer,
        name="transcode-and-package",
        agenda=PACKAGE_TEMPLATE,
        payload_schema=PACKAGE_SCHEMA,
    )

    submitted = [
        client.post("/api/v1/agendas/", entry["value"], format="json")
        for entry in examples(schema, "submit").values()
    ]
    bulk = client.post("/api/v1/agendas/bulk/", example(schema, "bulk", "TwoClips"), format="json")
    run = client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/",
        example(schema, "template run", "TranscodeAndPackage"),
        format="json",
    )

    assert [response.status_code for response in submitted] == [201, 201], [
        response.json() for response in submitted
    ]
    assert submitted[0].json()["insight_name"] == "transcode"
    assert submitted[0].json()["labels"] == {"project": "spring-campaign", "source": "upload"}
    assert bulk.status_code == 200
    assert all("id" in result for result in bulk.json()["results"]), bulk.json()
    assert run.status_code == 201, run.json()
    assert run.json()["operations"][0]["payload"] == {"input": "/media/in/clip.mov"}


def test_the_pull_and_report_examples_drive_an_agenda_to_succeeded(
    schema, demo_farm, submitter, worker, api_client_for
):
    submit = example(schema, "submit", "ProbeAndTranscode")
    agenda_id = api_client_for(submitter).post("/api/v1/agendas/", submit, format="json").json()
    insight = demo_farm["transcode"]
    insight_fill(insight_id=insight.pk)
    farm = api_client_for(worker)

    pulled = farm.post(
        f"/api/v1/insights/{insight.pk}/pull/", example(schema, "pull", "PullFour"), format="json"
    )
    (leased,) = pulled.json()["agendas"]
    execution, lease = leased["execution"]["id"], leased["execution"]["lease_token"]
    answers = [
        farm.post(
            f"/api/v1/executions/{execution}/report/",
            example(schema, "report", name),
            format="json",
            HTTP_X_POP_LEASE=lease,
        )
        for name in ("Heartbeat", "Progress", "Succeeded")
    ]

    assert pulled.status_code == 200
    assert leased["agenda"]["id"] == agenda_id["id"]
    assert [answer.status_code for answer in answers] == [200, 200, 200], answers[-1].json()
    assert answers[-1].json()["state"] == "succeeded"
    operations = {
        op["name"]: op
        for op in api_client_for(submitter)
        .get(f"/api/v1/agendas/{agenda_id['id']}/")
        .json()["progress"]["operations"]
    }
    assert operations["probe"]["result"] == {
        "summary": {"duration": 12.5, "width": 1920, "height": 1080}
    }
    assert operations["transcode"]["state"] == "succeeded"


def test_the_batch_report_example_reports_two_executions_with_their_leases(
    schema, demo_farm, submitter, worker, api_client_for
):
    submit = example(schema, "submit", "ProbeAndTranscode")
    client = api_client_for(submitter)
    for _ in range(2):
        client.post("/api/v1/agendas/", submit, format="json")
    insight = demo_farm["transcode"]
    insight_fill(insight_id=insight.pk)
    farm = api_client_for(worker)
    leased = farm.post(
        f"/api/v1/insights/{insight.pk}/pull/", example(schema, "pull", "PullFour"), format="json"
    ).json()["agendas"]
    batch = example(schema, "batch report", "TwoExecutions")
    for report, item in zip(batch["reports"], leased, strict=True):
        report.update(
            execution=item["execution"]["id"], lease_token=item["execution"]["lease_token"]
        )

    answer = farm.post("/api/v1/executions/report/", batch, format="json")

    assert answer.status_code == 200
    assert [(r["ok"], r["state"]) for r in answer.json()["results"]] == [
        (True, "executing"),
        (True, "succeeded"),
    ]
