"""agenda-templates/: CRUD, sharing, run and preview (docs/design.md §5.3, §10, §10.3)."""

import pytest

from agendas.models import Agenda, AgendaTemplate
from tests.factories import AgendaTemplateFactory

pytestmark = pytest.mark.django_db

BODY = {
    "name": "probe-it",
    "description": "Probe a file and log its size.",
    "agenda": {
        "operations": [
            {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}},
            {"name": "log", "type": "log", "payload": {"size": "@<probe.out::/size>"}},
        ],
        "priority": "@<default_priority>",
    },
    "static_parameters": {"default_priority": 6},
    "payload_schema": {"type": "object", "required": ["url"]},
}


def test_an_admin_creates_a_template_for_its_customer(admin_client, customer):
    response = admin_client.post(
        "/api/v1/agenda-templates/", BODY, format="json", HTTP_X_POP_CID="tpl-1"
    )

    assert response.status_code == 201
    template = AgendaTemplate.objects.get(name="probe-it")
    assert (template.customer, template.cid) == (customer, "tpl-1")
    assert response.json()["allowed_customer_ids"] == []


def test_a_submitter_may_not_create_templates(client):
    response = client.post("/api/v1/agenda-templates/", BODY, format="json")

    assert response.status_code == 403
    assert not AgendaTemplate.objects.exists()


def test_bad_template_bodies_are_400_by_field(admin_client, template):
    response = admin_client.post(
        "/api/v1/agenda-templates/",
        {"name": template.name, "agenda": {"operations": []}, "payload_schema": {"type": 5}},
        format="json",
    )
    duplicate = admin_client.post(
        "/api/v1/agenda-templates/", {**BODY, "name": template.name}, format="json"
    )

    assert response.status_code == 400
    assert set(response.json()) == {"agenda.operations", "payload_schema"}
    assert (duplicate.status_code, list(duplicate.json())) == (400, ["name"])
    assert AgendaTemplate.objects.count() == 1


def test_templates_list_own_global_and_shared_but_not_foreign(
    client, customer, other_customer, template
):
    AgendaTemplateFactory(customer=other_customer, name="theirs")
    AgendaTemplateFactory(customer=other_customer, name="everyones", is_global=True)
    shared = AgendaTemplateFactory(customer=other_customer, name="for-acme")
    shared.allowed_customers.add(customer)

    names = [row["name"] for row in client.get("/api/v1/agenda-templates/").json()["results"]]

    assert names == ["everyones", "for-acme", "probe-one"]


def test_a_foreign_template_is_404_on_every_verb(admin_client, other_customer):
    theirs = AgendaTemplateFactory(customer=other_customer, name="theirs")
    url = f"/api/v1/agenda-templates/{theirs.pk}/"

    statuses = [
        admin_client.get(url).status_code,
        admin_client.patch(url, {"description": "x"}, format="json").status_code,
        admin_client.delete(url).status_code,
        admin_client.post(f"{url}run/", {"payload": {}}, format="json").status_code,
        admin_client.post(f"{url}preview/", {"payload": {}}, format="json").status_code,
    ]

    assert statuses == [404] * 5
    theirs.refresh_from_db()
    assert theirs.description == ""
    assert not Agenda.objects.exists()


def test_a_shared_template_is_readable_but_not_writable(admin_client, customer, other_customer):
    shared = AgendaTemplateFactory(customer=other_customer, name="shared", is_global=True)

    read = admin_client.get(f"/api/v1/agenda-templates/{shared.pk}/")
    write = admin_client.patch(
        f"/api/v1/agenda-templates/{shared.pk}/", {"description": "mine"}, format="json"
    )

    assert (read.status_code, read.json()["allowed_customer_ids"]) == (200, None)
    assert write.status_code == 403
    shared.refresh_from_db()
    assert shared.description == ""


def test_the_owner_admin_updates_and_deletes_a_template(admin_client, template):
    url = f"/api/v1/agenda-templates/{template.pk}/"

    changed = admin_client.patch(url, {"description": "v2"}, format="json")
    deleted = admin_client.delete(url)

    assert (changed.status_code, changed.json()["description"]) == (200, "v2")
    assert deleted.status_code == 204
    assert not AgendaTemplate.objects.filter(pk=template.pk).exists()


def test_running_a_template_submits_the_expanded_agenda(client, template, insight):
    response = client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/",
        {"payload": {"url": "s3://in/b.mp4"}, "link_id": "run-1", "priority": 8},
        format="json",
    )

    assert response.status_code == 201
    agenda = Agenda.objects.get(pk=response.json()["id"])
    assert agenda.template == template
    assert agenda.operations[0]["payload"] == {"url": "s3://in/b.mp4"}
    assert (agenda.link_id, agenda.priority) == ("run-1", 8)


def test_running_with_a_payload_the_schema_refuses_is_400(client, template, insight):
    response = client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/", {"payload": {"uri": "x"}}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["payload"])
    assert not Agenda.objects.exists()


def test_a_viewer_may_not_run_a_template(viewer_client, template, insight):
    response = viewer_client.post(
        f"/api/v1/agenda-templates/{template.pk}/run/", {"payload": {"url": "u"}}, format="json"
    )

    assert response.status_code == 403
    assert not Agenda.objects.exists()


def test_preview_expands_without_submitting_and_lists_problems(viewer_client, customer):
    template = AgendaTemplateFactory(
        customer=customer,
        name="dangling",
        agenda={"operations": [{"name": "a", "type": "log", "depends_on": ["@<pop.payload>"]}]},
    )

    response = viewer_client.post(
        f"/api/v1/agenda-templates/{template.pk}/preview/", {"payload": "ghost"}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["agenda"]["operations"][0]["depends_on"] == ["ghost"]
    assert response.json()["errors"] == {"operations.0.depends_on": ["Unknown operation 'ghost'."]}
    assert response.json()["version"] is None  # saved around the services: no versions
    assert not Agenda.objects.exists()


def test_preview_names_the_version_it_expanded(admin_client, viewer_client, customer):
    created = admin_client.post(
        "/api/v1/agenda-templates/",
        {
            "name": "versioned",
            "customer": str(customer.pk),
            "agenda": {"operations": [{"name": "a", "type": "log"}]},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    template_id = created.json()["id"]
    edited = admin_client.patch(
        f"/api/v1/agenda-templates/{template_id}/",
        {"agenda": {"operations": [{"name": "b", "type": "log"}]}},
        format="json",
    )
    assert edited.status_code == 200, edited.content

    def preview(**extra):
        return viewer_client.post(
            f"/api/v1/agenda-templates/{template_id}/preview/",
            {"payload": {}, **extra},
            format="json",
        ).json()

    latest, first = preview(), preview(version=1)

    assert (latest["version"], latest["agenda"]["operations"][0]["name"]) == (2, "b")
    assert (first["version"], first["agenda"]["operations"][0]["name"]) == (1, "a")


def test_preview_of_a_refused_payload_is_400(viewer_client, template):
    response = viewer_client.post(
        f"/api/v1/agenda-templates/{template.pk}/preview/", {"payload": []}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["payload"])
