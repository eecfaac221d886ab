"""Template versions (docs/design.md §5.3): saves that change what a run expands add a version,
agendas record theirs, runs and schedules pick one, a diff shows exactly the changed lines."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.core.exceptions import ValidationError

from agendas.models import Agenda, AgendaTemplate, AgendaTemplateVersion
from agendas.services import agenda_abort, agenda_rerun
from agendas.template_services import (
    agenda_template_create,
    agenda_template_preview,
    agenda_template_run,
    agenda_template_update,
)
from agendas.template_versions import (
    MAX_DIFF_LINES,
    side_by_side,
    template_version_get,
    version_text,
    versions_diff,
)
from audit.models import AuditEvent
from core.principals import SYSTEM
from scheduling.cron_services import CronRun, schedules_run_due
from scheduling.schedule_services import schedule_create, schedule_trigger, schedule_update

pytestmark = pytest.mark.django_db

BODY = {
    "operations": [
        {"name": "probe", "type": "mediainfo", "payload": {"url": "@<pop.payload::/url>"}},
    ],
}


def body_with(operation_type: str = "mediainfo", name: str = "probe") -> dict:
    return {
        "operations": [
            {"name": name, "type": operation_type, "payload": {"url": "@<pop.payload::/url>"}}
        ]
    }


@pytest.fixture
def make_template(admin_member, insight):
    def make(**fields):
        fields.setdefault("name", "probe-it")
        fields.setdefault("agenda", BODY)
        return agenda_template_create(
            principal=admin_member.user, customer=admin_member.customer, **fields
        )

    return make


def numbers(template: AgendaTemplate) -> list[int]:
    return list(template.versions.order_by("number").values_list("number", flat=True))


def run(principal, template, **options):
    agenda, _ = agenda_template_run(
        principal=principal.user,
        template=template,
        payload={"url": "s3://in/a.mp4"},
        customer=principal.customer,
        **options,
    )
    return agenda


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


# --- recording versions --------------------------------------------------------------------


def test_creating_a_template_records_its_version_1_with_author_and_note(
    make_template, admin_member
):
    template = make_template(static_parameters={"size": 2}, note="first cut")

    [version] = template.versions.all()
    assert (version.number, version.author, version.note) == (1, admin_member.user, "first cut")
    assert version.fields() == {
        "agenda": BODY,
        "static_parameters": {"size": 2},
        "payload_schema": None,
    }


def test_changing_the_body_adds_the_next_version_and_the_template_mirrors_it(
    make_template, admin_member
):
    template = make_template()

    agenda_template_update(
        principal=admin_member.user, template=template, agenda=body_with("log"), note="log it"
    )

    template.refresh_from_db()
    assert numbers(template) == [1, 2]
    latest = template_version_get(template=template, number=2)
    assert (latest.note, latest.agenda) == ("log it", body_with("log"))
    assert template.agenda == body_with("log")
    assert template_version_get(template=template, number=1).agenda == BODY
    event = AuditEvent.objects.filter(action="template.update").get()
    assert event.detail == {"fields": ["agenda"], "version": 2}


@pytest.mark.parametrize(
    "fields",
    [
        {"description": "now with words"},
        {"name": "renamed"},
        {"is_global": False},
        {"agenda": BODY},  # the same body again
        {"agenda": BODY, "static_parameters": {}, "payload_schema": None},
    ],
)
def test_a_save_that_leaves_body_parameters_and_schema_alone_adds_no_version(
    make_template, admin_member, fields
):
    template = make_template()

    agenda_template_update(principal=admin_member.user, template=template, **fields)

    assert numbers(template) == [1]


def test_static_parameters_and_payload_schema_changes_are_versions_too(make_template, admin_member):
    template = make_template()

    agenda_template_update(
        principal=admin_member.user, template=template, static_parameters={"size": 1}
    )
    agenda_template_update(
        principal=admin_member.user, template=template, payload_schema={"type": "object"}
    )
    # 1 and true are equal in Python, not in JSON: still a change.
    agenda_template_update(
        principal=admin_member.user, template=template, static_parameters={"size": True}
    )

    assert numbers(template) == [1, 2, 3, 4]


def test_a_refused_update_adds_no_version_and_changes_nothing(make_template, admin_member):
    template = make_template()

    with pytest.raises(ValidationError) as refused:
        agenda_template_update(
            principal=admin_member.user, template=template, agenda={"operations": []}
        )

    assert "agenda.operations" in refused.value.message_dict
    template.refresh_from_db()
    assert template.agenda == BODY
    assert numbers(template) == [1]


# --- runs pick a version; agendas keep theirs ----------------------------------------------


def test_a_run_records_the_latest_version_and_an_edit_leaves_earlier_agendas_alone(
    make_template, admin_member, submitter
):
    template = make_template()
    first = run(submitter, template)

    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))
    second = run(submitter, template)

    first.refresh_from_db()
    assert (first.template_version, first.operations[0]["type"]) == (1, "mediainfo")
    assert (second.template_version, second.operations[0]["type"]) == (2, "log")


def test_a_run_may_name_an_earlier_version(make_template, admin_member, submitter):
    template = make_template()
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))

    agenda = run(submitter, template, version=1)

    assert (agenda.template_version, agenda.operations[0]["type"]) == (1, "mediainfo")


def test_an_unknown_version_is_refused_naming_version_and_submits_nothing(make_template, submitter):
    template = make_template()

    with pytest.raises(ValidationError) as refused:
        run(submitter, template, version=7)

    assert refused.value.message_dict == {"version": ["Template probe-it has no version 7."]}
    assert not Agenda.objects.exists()


def test_a_preview_expands_the_version_it_names(make_template, admin_member, submitter):
    template = make_template()
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))

    latest = agenda_template_preview(
        principal=submitter.user, template=template, payload={"url": "u"}
    )
    first = agenda_template_preview(
        principal=submitter.user, template=template, payload={"url": "u"}, version=1
    )

    assert (latest.agenda["operations"][0]["type"], latest.version) == ("log", 2)
    assert (first.agenda["operations"][0]["type"], first.errors, first.version) == (
        "mediainfo",
        {},
        1,
    )


def test_a_version_keeps_its_own_payload_schema(make_template, admin_member, submitter):
    template = make_template()
    agenda_template_update(
        principal=admin_member.user,
        template=template,
        payload_schema={"type": "object", "required": ["size"]},
    )

    with pytest.raises(ValidationError):
        run(submitter, template)
    agenda = run(submitter, template, version=1)

    assert agenda.template_version == 1


def test_a_rerun_runs_the_agendas_own_operations_not_the_templates_latest(
    make_template, admin_member, submitter
):
    template = make_template()
    agenda = run(submitter, template)
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))
    agenda_abort(principal=SYSTEM, agenda=agenda)

    agenda_rerun(principal=submitter.user, agenda=agenda)

    agenda.refresh_from_db()
    assert (agenda.template_version, agenda.operations[0]["type"]) == (1, "mediainfo")
    assert list(agenda.progress.operations.values_list("type", flat=True)) == ["mediainfo"]


def test_a_template_written_around_the_services_runs_its_own_fields_and_records_no_version(
    customer, submitter, insight
):
    template = AgendaTemplate.objects.create(customer=customer, name="raw", agenda=BODY)

    agenda = run(submitter, template)

    assert (agenda.template_version, agenda.operations[0]["type"]) == (None, "mediainfo")


# --- schedules: pinned or following --------------------------------------------------------


@pytest.fixture
def make_schedule(admin_member):
    def make(template, **fields):
        return schedule_create(
            principal=admin_member.user,
            customer=admin_member.customer,
            template=template,
            name=fields.pop("name", "hourly"),
            cron="0 * * * *",
            payload={"url": "s3://in/daily.mp4"},
            **fields,
        )

    return make


def test_an_edit_leaves_a_pinned_schedule_on_its_version_and_a_following_one_picks_it_up(
    make_template, make_schedule, admin_member, settings
):
    settings.POP_FILL_NUDGE = "off"
    template = make_template()
    with time_machine.travel(utc(2026, 5, 4, 9, 30), tick=False) as clock:
        pinned = make_schedule(template, name="pinned", template_version=1)
        following = make_schedule(template, name="following")
        agenda_template_update(
            principal=admin_member.user, template=template, agenda=body_with("log")
        )
        clock.move_to(utc(2026, 5, 4, 10, 0, 4))

        assert schedules_run_due() == CronRun(fired=2)

    [from_pinned] = Agenda.objects.filter(schedule=pinned)
    [from_following] = Agenda.objects.filter(schedule=following)
    assert (from_pinned.template_version, from_pinned.operations[0]["type"]) == (1, "mediainfo")
    assert (from_following.template_version, from_following.operations[0]["type"]) == (2, "log")


def test_a_triggered_run_of_a_pinned_schedule_uses_the_pinned_version(
    make_template, make_schedule, admin_member, submitter
):
    template = make_template()
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))
    schedule = make_schedule(template, template_version=1)

    agenda = schedule_trigger(principal=submitter.user, schedule=schedule)

    assert (agenda.template_version, agenda.operations[0]["type"]) == (1, "mediainfo")


def test_pinning_a_version_the_template_lacks_is_refused_naming_template_version(
    make_template, make_schedule
):
    template = make_template()
    schedule = make_schedule(template)

    with pytest.raises(ValidationError) as refused:
        make_schedule(template, name="other", template_version=3)
    with pytest.raises(ValidationError) as refused_update:
        schedule_update(principal=SYSTEM, schedule=schedule, template_version=3)

    assert list(refused.value.message_dict) == ["template_version"]
    assert list(refused_update.value.message_dict) == ["template_version"]
    schedule.refresh_from_db()
    assert schedule.template_version is None
    assert [s.name for s in type(schedule).objects.all()] == ["hourly"]


def test_a_schedule_pinned_to_a_version_then_set_to_follow_the_latest_runs_the_latest(
    make_template, make_schedule, admin_member, submitter
):
    template = make_template()
    schedule = make_schedule(template, template_version=1)
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))

    schedule_update(principal=admin_member.user, schedule=schedule, template_version=None)
    agenda = schedule_trigger(principal=submitter.user, schedule=schedule)

    assert agenda.template_version == 2


# --- diffs ---------------------------------------------------------------------------------


def test_a_diff_of_two_versions_shows_exactly_the_changed_lines(make_template, admin_member):
    template = make_template(static_parameters={"size": 1, "zone": "eu"})
    agenda_template_update(
        principal=admin_member.user, template=template, static_parameters={"size": 2, "zone": "eu"}
    )
    old, new = (template_version_get(template=template, number=n) for n in (1, 2))

    diff = versions_diff(old, new)

    changed = [
        line for line in diff.unified if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == ['-    "size": 1,', '+    "size": 2,']
    assert diff.unified[:2] == ["--- version 1", "+++ version 2"]
    assert [
        (row.kind, row.left, row.right) for row in diff.rows if row.kind not in ("equal", "skip")
    ] == [("replace", '    "size": 1,', '    "size": 2,')]
    assert diff.changed is True


def test_a_diff_of_a_version_with_itself_is_empty(make_template):
    template = make_template()
    version = template_version_get(template=template, number=1)

    diff = versions_diff(version, version)

    assert (diff.changed, diff.unified, diff.rows) == (False, [], [])


def test_a_side_by_side_diff_folds_long_unchanged_stretches():
    left = [f"line {n}" for n in range(20)]
    right = [*left[:10], "new line", *left[10:]]

    rows = side_by_side(left, right)

    assert rows[0].kind == "skip" and rows[0].left_number == 7
    assert [row.kind for row in rows[1:]] == ["equal"] * 3 + ["insert"] + ["equal"] * 3 + ["skip"]
    assert rows[4].right == "new line" and rows[4].left_number is None
    assert rows[-1].left_number == 7


def test_a_version_too_long_to_diff_is_refused_naming_its_side(make_template):
    template = make_template()
    huge = AgendaTemplateVersion(
        template=template,
        number=2,
        agenda={"operations": [{"name": f"op{n}", "type": "log"} for n in range(MAX_DIFF_LINES)]},
    )
    small = template_version_get(template=template, number=1)

    with pytest.raises(ValidationError) as refused:
        versions_diff(small, huge)

    assert list(refused.value.message_dict) == ["to"]
    assert len(version_text(huge.fields())) > MAX_DIFF_LINES


def test_a_template_without_versions_gets_its_first_when_its_body_changes_not_before(
    customer, admin_member
):
    template = AgendaTemplate.objects.create(customer=customer, name="raw", agenda=BODY)

    agenda_template_update(principal=admin_member.user, template=template, description="x")
    described = numbers(template)
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))

    assert (described, numbers(template)) == ([], [1])
    assert template.versions.get().agenda == body_with("log")


def test_the_schedule_pages_say_which_version_a_schedule_runs(
    make_template, make_schedule, admin_member
):
    from django.test import Client

    template = make_template()
    agenda_template_update(principal=admin_member.user, template=template, agenda=body_with("log"))
    pinned = make_schedule(template, name="pinned", template_version=1)
    following = make_schedule(template, name="following")
    browser = Client()
    browser.force_login(admin_member.user)

    pinned_page = browser.get(f"/schedules/{pinned.pk}/").content.decode()
    following_page = browser.get(f"/schedules/{following.pk}/").content.decode()
    listing = browser.get("/schedules/").content.decode()

    assert '<dd id="schedule-template-version">version 1 (pinned)</dd>' in pinned_page
    assert '<dd id="schedule-template-version">the latest</dd>' in following_page
    assert listing.count('<span class="muted">v1</span>') == 1
