"""docs/design.md §5: submission writes everything or nothing; templates; idempotency; mapping."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError
from django.utils import timezone

from agendas.models import Agenda, AgendaProgress, OperationProgress
from agendas.services import agenda_submit
from agendas.states import machine
from agendas.template_services import template_expand, template_run
from scheduling.models import ReadyAgenda
from tests.factories import AgendaTemplateFactory

pytestmark = pytest.mark.django_db


def _row_counts() -> tuple[int, int, int, int]:
    return (
        Agenda.objects.count(),
        AgendaProgress.objects.count(),
        OperationProgress.objects.count(),
        ReadyAgenda.objects.count(),
    )


def test_submit_writes_agenda_progress_operations_and_ready_row(submitter, submit_agenda, insight):
    agenda = submit_agenda(submitter, link_id="batch-7", priority=8, cid="cid-1")

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == "ready"
    assert progress.link_id == "batch-7"
    assert list(progress.operations.values_list("name", "type", "state")) == [
        ("probe", "mediainfo", "waiting"),
        ("report", "log", "waiting"),
    ]
    ready = ReadyAgenda.objects.get(agenda=agenda)
    assert (ready.insight_id, ready.customer_id, ready.priority) == (
        insight.pk,
        agenda.customer_id,
        8,
    )
    assert agenda.cid == "cid-1"


def test_do_not_run_agenda_is_pending_without_ready_row(submitter, submit_agenda):
    agenda = submit_agenda(submitter, do_not_run=True)

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.state, progress.do_not_run) == ("pending", True)
    assert not ReadyAgenda.objects.filter(agenda=agenda).exists()


def test_future_run_after_is_pending_and_past_run_after_is_ready(submitter, submit_agenda):
    later = submit_agenda(submitter, run_after=timezone.now() + timedelta(minutes=5))
    earlier = submit_agenda(submitter, run_after=timezone.now() - timedelta(minutes=5))

    assert AgendaProgress.objects.get(agenda=later).state == "pending"
    assert AgendaProgress.objects.get(agenda=earlier).state == "ready"


def test_invalid_operations_are_400_with_field_paths_and_write_nothing(submitter, submit_agenda):
    before = _row_counts()

    with pytest.raises(ValidationError) as raised:
        submit_agenda(
            submitter,
            operations=[
                {"name": "a", "type": "mediainfo"},
                {"name": "b", "type": "", "depends_on": ["zzz"]},
            ],
        )

    errors = raised.value.message_dict
    assert "operations.1.type" in errors
    assert "operations.1.depends_on" in errors
    assert _row_counts() == before


def test_no_matching_insight_is_said_on_each_operations_type_with_the_types_accepted(
    submitter, submit_agenda
):
    before = _row_counts()
    with pytest.raises(ValidationError) as raised:
        submit_agenda(
            submitter,
            operations=[{"name": "x", "type": "transcod"}, {"name": "y", "type": "package"}],
        )

    accepted = "types accepted: log, mediainfo."
    assert raised.value.message_dict == {
        "operations.0.type": [f"No insight of pool farm accepts type 'transcod'; {accepted}"],
        "operations.1.type": [f"No insight of pool farm accepts type 'package'; {accepted}"],
    }
    assert _row_counts() == before


def test_default_insight_picks_among_matches(submitter, submit_agenda, insight, pool):
    from tests.factories import InsightFactory

    second = InsightFactory(
        resource_pool=pool, name="second", order=5, mappers={"operation_type": ["mediainfo"]}
    )
    operations = [{"name": "probe", "type": "mediainfo"}]

    by_order = submit_agenda(submitter, operations=operations)
    by_default = submit_agenda(submitter, operations=operations, default_insight="SECOND")

    assert by_order.insight_id == insight.pk
    assert by_default.insight_id == second.pk


def test_submission_is_all_or_nothing_when_a_later_write_fails(
    submitter, submit_agenda, monkeypatch
):
    before = _row_counts()

    def broken_ready(*args, **kwargs):
        raise IntegrityError("simulated failure after the first writes")

    monkeypatch.setattr(machine, "_enter_ready", broken_ready)

    with pytest.raises(IntegrityError):
        submit_agenda(submitter)

    assert _row_counts() == before


def test_same_idempotency_key_twice_gives_one_agenda(submitter, operations, insight):
    first, created_first = agenda_submit(
        principal=submitter.user, operations=operations, idempotency_key="k-1"
    )
    second, created_second = agenda_submit(
        principal=submitter.user, operations=operations, idempotency_key="k-1"
    )

    assert (created_first, created_second) == (True, False)
    assert first.pk == second.pk
    assert Agenda.objects.filter(idempotency_key="k-1").count() == 1


def test_idempotency_key_is_a_unique_constraint_not_only_a_lookup(submitter, submit_agenda):
    agenda = submit_agenda(submitter, idempotency_key="k-2")

    with pytest.raises(IntegrityError):
        Agenda.objects.create(
            customer=agenda.customer,
            insight=agenda.insight,
            operations=agenda.operations,
            idempotency_key="k-2",
        )


def test_viewer_may_not_submit_and_nothing_is_written(viewer, submit_agenda):
    before = _row_counts()

    with pytest.raises(PermissionDenied):
        submit_agenda(viewer)

    assert _row_counts() == before


def test_member_of_another_customer_may_not_submit_for_this_one(
    other_submitter, customer, operations, insight
):
    with pytest.raises(PermissionDenied):
        agenda_submit(principal=other_submitter.user, customer=customer, operations=operations)

    assert Agenda.objects.count() == 0


def test_template_run_expands_payload_and_static_parameters(submitter, customer, insight):
    template = AgendaTemplateFactory(
        customer=customer,
        agenda={
            "operations": [
                {
                    "name": "probe",
                    "type": "mediainfo",
                    "payload": {
                        "url": "@<pop.payload::/url>",
                        "deep": "@<pop.payload::/deep>",
                        "bucket": "@<bucket>",
                        "label": "in-@<bucket>-@<pop.payload::/n>",
                    },
                }
            ],
            "priority": 7,
        },
        static_parameters={"bucket": "media"},
    )

    agenda, created = template_run(
        principal=submitter.user,
        template=template,
        payload={"url": "s3://x.mp4", "deep": True, "n": 3},
        link_id="run-1",
    )

    assert created is True
    assert agenda.operations[0]["payload"] == {
        "url": "s3://x.mp4",
        "deep": True,
        "bucket": "media",
        "label": "in-media-3",
    }
    assert (agenda.priority, agenda.link_id, agenda.template_id) == (7, "run-1", template.pk)


def test_template_payload_schema_violation_is_400_on_the_payload_path(customer):
    template = AgendaTemplateFactory(
        customer=customer,
        payload_schema={
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string"}},
        },
    )

    with pytest.raises(ValidationError) as raised:
        template_expand(template=template, payload={"url": 5})

    assert list(raised.value.message_dict) == ["payload.url"]
