"""The template versions migration on a populated database: every template gets its version 1,
copied from its fields and dated when the template last changed; agendas record no version."""

from datetime import UTC, datetime

import pytest

from tests.migration_steps import migrate

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("back_to_the_latest_schema"),
]

BEFORE = [("agendas", "0018_agenda_waits")]
AFTER = [("agendas", "0019_template_versions")]


def test_every_existing_template_gets_its_version_1_from_its_current_fields():
    apps = migrate(BEFORE)
    Customer = apps.get_model("resourcepools", "Customer")
    Template = apps.get_model("agendas", "AgendaTemplate")
    customer = Customer.objects.create(name="Acme", slug="acme")
    bodies = {
        f"t{n}": {"operations": [{"name": "probe", "type": "log", "payload": {"n": n}}]}
        for n in range(3)
    }
    for name, body in bodies.items():
        Template.objects.create(
            customer=customer,
            name=name,
            agenda=body,
            static_parameters={"size": 1},
            payload_schema={"type": "object"} if name == "t0" else None,
        )
    edited = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    Template.objects.filter(name="t1").update(updated_at=edited)

    apps = migrate(AFTER)

    Version = apps.get_model("agendas", "AgendaTemplateVersion")
    versions = {
        version.template.name: version
        for version in Version.objects.select_related("template").order_by("template__name")
    }
    assert sorted(versions) == ["t0", "t1", "t2"]
    assert {name: version.agenda for name, version in versions.items()} == bodies
    assert {version.number for version in versions.values()} == {1}
    assert versions["t0"].payload_schema == {"type": "object"}
    assert versions["t2"].static_parameters == {"size": 1}
    assert versions["t1"].created_at == edited
    assert versions["t1"].author_id is None
