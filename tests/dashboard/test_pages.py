"""Operator pages through the Django test client: access, scoping, actions, forms, query counts."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agendas.models import Agenda, AgendaProgress
from core.principals import SYSTEM
from resourcepools.models import Membership
from scheduling.fill import insight_fill
from scheduling.models import Alert, AlertRule, CallbackDelivery, Schedule
from scheduling.pull import insight_pull
from scheduling.report import execution_report
from scheduling.schedule_services import schedule_create
from tests.factories import AgendaTemplateFactory, CustomerFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


def state_of(agenda: Agenda) -> str:
    return AgendaProgress.objects.get(agenda=agenda).state


def text_of(response) -> str:
    return response.content.decode()


@pytest.fixture
def template(customer, insight):
    return AgendaTemplateFactory(
        customer=customer,
        name="probe-one",
        payload_schema={
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string"}},
        },
    )


@pytest.fixture
def other_template(other_customer):
    return AgendaTemplateFactory(customer=other_customer, name="globex-private", is_global=False)


@pytest.fixture
def schedule(admin_member, template):
    return schedule_create(
        principal=admin_member.user,
        customer=admin_member.customer,
        template=template,
        name="nightly",
        cron="0 2 * * *",
        payload={"url": "s3://in/nightly.mp4"},
    )


@pytest.fixture
def other_schedule(other_customer, other_template, make_principal):
    other_admin = make_principal(other_customer, Role.ADMIN)
    return schedule_create(
        principal=other_admin.user,
        customer=other_customer,
        template=other_template,
        name="globex-hourly",
        cron="0 * * * *",
        payload={"url": "s3://globex/x"},
    )


@pytest.fixture
def world(submitter, agenda_in_state, template, schedule):
    """One agenda per interesting state, a template and a schedule of the submitter's customer."""
    # Pulling takes the insight's whole queue, so the waiting agendas are submitted last.
    succeeded = agenda_in_state(submitter, "succeeded", link_id="batch-1")
    executing = agenda_in_state(submitter, "executing")
    return {
        "succeeded": succeeded,
        "executing": executing,
        "ready": agenda_in_state(submitter, "ready", link_id="batch-1", external_id="ext-ready"),
        "paused": agenda_in_state(submitter, "paused"),
    }


def page_urls(world, template, schedule) -> list[str]:
    agenda = world["executing"]
    return [
        "/",
        "/?partial=1",
        "/agendas/",
        "/agendas/?partial=1&state=ready",
        f"/agendas/{agenda.pk}/",
        f"/agendas/{agenda.pk}/?partial=1",
        "/templates/",
        f"/templates/{template.pk}/",
        "/pools/",
        "/pools/?partial=1",
        "/schedules/",
        f"/schedules/{schedule.pk}/",
        "/progress/",
        "/progress/?link_id=batch-1",
    ]


# --- access ------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["staff_user", "submitter", "viewer", "admin_member"])
def test_every_page_is_200_for_allowed_users(who, request, world, template, schedule, client_for):
    client = client_for(request.getfixturevalue(who))

    for url in page_urls(world, template, schedule):
        assert client.get(url).status_code == 200, url


def test_every_page_redirects_anonymous_users_to_login(world, template, schedule, client):
    for url in page_urls(world, template, schedule):
        response = client.get(url)

        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next=/"), url


def test_actions_redirect_anonymous_users_to_login_and_change_nothing(world, client):
    agenda = world["ready"]

    response = client.post(f"/agendas/{agenda.pk}/abort/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert state_of(agenda) == "ready"


def test_login_page_renders_a_labelled_form_and_logs_in(client, submitter):
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert '<label for="id_username">Username</label>' in text_of(page)
    assert '<label for="id_password">Password</label>' in text_of(page)

    response = client.post(
        "/accounts/login/", {"username": submitter.user.username, "password": "secret-password"}
    )

    assert response.status_code == 302
    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_logout_is_a_post_and_ends_the_session(client_for, submitter):
    client = client_for(submitter)
    assert 'action="/accounts/logout/"' in text_of(client.get("/"))

    client.post("/accounts/logout/")

    assert client.get("/").status_code == 302


def test_another_customers_agenda_template_and_schedule_are_404(
    client_for, other_submitter, world, template, schedule
):
    client = client_for(other_submitter)
    agenda = world["ready"]

    assert client.get(f"/agendas/{agenda.pk}/").status_code == 404
    assert client.get(f"/agendas/{agenda.pk}/?partial=1").status_code == 404
    assert client.get(f"/templates/{template.pk}/").status_code == 404
    assert client.get(f"/schedules/{schedule.pk}/").status_code == 404


def test_actions_on_another_customers_objects_are_404_and_change_nothing(
    client_for, other_submitter, world, template, schedule
):
    client = client_for(other_submitter)
    agenda = world["ready"]

    assert client.post(f"/agendas/{agenda.pk}/abort/").status_code == 404
    assert client.post(f"/agendas/{agenda.pk}/pause/").status_code == 404
    assert client.post(f"/schedules/{schedule.pk}/pause/").status_code == 404
    run = client.post(f"/templates/{template.pk}/", {"action": "run", "payload": '{"url": "x"}'})
    assert run.status_code == 404

    assert state_of(agenda) == "ready"
    assert Schedule.objects.get(pk=schedule.pk).state == "active"
    assert Agenda.objects.filter(customer=other_submitter.customer).exists() is False


def test_lists_show_only_the_customers_own_rows(
    client_for, other_submitter, world, template, schedule, agenda_in_state
):
    own = agenda_in_state(other_submitter, "ready")
    client = client_for(other_submitter)

    agendas = text_of(client.get("/agendas/"))
    assert str(own.pk) in agendas
    assert all(str(agenda.pk) not in agendas for agenda in world.values())
    assert template.name not in text_of(client.get("/templates/"))
    assert schedule.name not in text_of(client.get("/schedules/"))
    summary = text_of(client.get("/progress/?link_id=batch-1"))
    assert "No visible agenda has this link id." in summary
    assert str(world["ready"].pk) not in summary


def test_staff_see_every_customers_agendas(
    client_for, staff_user, world, agenda_in_state, other_submitter
):
    other = agenda_in_state(other_submitter, "ready")

    page = text_of(client_for(staff_user).get("/agendas/"))

    assert str(other.pk) in page
    assert all(str(agenda.pk) in page for agenda in world.values())


def test_a_foreign_customer_filter_shows_nothing(client_for, other_submitter, world, customer):
    page = text_of(client_for(other_submitter).get(f"/agendas/?customer={customer.pk}"))

    assert "No agenda matches." in page


# --- agenda actions ----------------------------------------------------------------------------


def action_forms(html: str) -> set[str]:
    return set(re.findall(r'action="/agendas/[0-9a-f-]+/(\w+)/"', html))


def test_viewer_sees_no_action_buttons(client_for, viewer, world):
    client = client_for(viewer)

    for agenda in world.values():
        html = text_of(client.get(f"/agendas/{agenda.pk}/"))
        assert action_forms(html) == set()
        assert "need the submitter role" in html


def test_viewer_posting_an_action_is_403_and_changes_nothing(client_for, viewer, world):
    agenda = world["ready"]

    response = client_for(viewer).post(f"/agendas/{agenda.pk}/abort/")

    assert response.status_code == 403
    assert state_of(agenda) == "ready"
    assert CallbackDelivery.objects.filter(agenda=agenda).exists() is False


def test_submitter_sees_the_buttons_the_state_allows(client_for, submitter, world):
    client = client_for(submitter)

    def offered(name):
        return action_forms(text_of(client.get(f"/agendas/{world[name].pk}/")))

    assert offered("ready") == {"pause", "abort"}
    assert offered("executing") == {"pause", "abort"}
    assert offered("paused") == {"resume", "abort", "rerun"}
    assert offered("succeeded") == {"rerun"}


def test_abort_button_aborts_a_ready_agenda_with_a_flash_message(client_for, submitter, world):
    agenda = world["ready"]
    client = client_for(submitter)

    response = client.post(f"/agendas/{agenda.pk}/abort/", follow=True)

    assert response.redirect_chain == [(f"/agendas/{agenda.pk}/", 302)]
    assert state_of(agenda) == "aborted"
    html = text_of(response)
    assert "Agenda aborted." in html
    assert '<span class="badge state-aborted">aborted</span>' in html


def test_abort_of_an_executing_agenda_requests_it_from_the_worker(client_for, submitter, world):
    agenda = world["executing"]

    response = client_for(submitter).post(f"/agendas/{agenda.pk}/abort/", follow=True)

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.state, progress.abort_requested) == ("executing", True)
    assert "Abort requested: the worker stops at its next report." in text_of(response)
    assert "abort requested" in text_of(response)


def test_pause_then_resume_buttons_move_the_agenda(client_for, submitter, world):
    agenda = world["ready"]
    client = client_for(submitter)

    paused = client.post(f"/agendas/{agenda.pk}/pause/", follow=True)
    assert state_of(agenda) == "paused"
    assert "Agenda paused." in text_of(paused)

    resumed = client.post(f"/agendas/{agenda.pk}/resume/", follow=True)
    assert state_of(agenda) == "ready"
    assert "Agenda resumed" in text_of(resumed)


def test_a_pause_the_worker_has_not_honoured_can_be_withdrawn_from_the_page(
    client_for, submitter, world
):
    agenda = world["executing"]
    client = client_for(submitter)
    client.post(f"/agendas/{agenda.pk}/pause/")

    offered = text_of(client.get(f"/agendas/{agenda.pk}/"))
    client.post(f"/agendas/{agenda.pk}/resume/")

    assert "Withdraw the pause" in offered
    progress = AgendaProgress.objects.get(agenda=agenda)
    assert (progress.state, progress.pause_requested) == ("executing", False)


def test_rerun_reset_all_of_a_succeeded_agenda_makes_it_ready(client_for, submitter, world):
    agenda = world["succeeded"]

    response = client_for(submitter).post(
        f"/agendas/{agenda.pk}/rerun/", {"mode": "reset_all"}, follow=True
    )

    assert state_of(agenda) == "ready"
    assert "Agenda rerun (reset all): it is ready now." in text_of(response)


def test_rerun_of_chosen_operations_resets_them_and_their_dependants(
    client_for, submitter, agenda_in_state
):
    agenda = agenda_in_state(submitter, "aborted")

    client_for(submitter).post(
        f"/agendas/{agenda.pk}/rerun/", {"mode": "operations_to_reset", "operations": ["probe"]}
    )

    progress = AgendaProgress.objects.get(agenda=agenda)
    assert progress.state == "ready"
    assert {op.name: op.state for op in progress.operations.all()} == {
        "probe": "waiting",
        "report": "waiting",
    }


def test_rerun_of_chosen_operations_without_a_choice_flashes_the_reason(
    client_for, submitter, world
):
    agenda = world["succeeded"]

    response = client_for(submitter).post(
        f"/agendas/{agenda.pk}/rerun/", {"mode": "operations_to_reset"}, follow=True
    )

    assert state_of(agenda) == "succeeded"
    assert "Refused: Name at least one operation to reset." in text_of(response)


def test_a_refused_transition_flashes_the_409_reason_and_changes_nothing(
    client_for, submitter, world
):
    agenda = world["ready"]

    response = client_for(submitter).post(f"/agendas/{agenda.pk}/resume/", follow=True)

    assert state_of(agenda) == "ready"
    assert (
        f"Refused (409): Agenda {agenda.pk} is ready; only a paused agenda can be resumed."
        in text_of(response)
    )
    assert CallbackDelivery.objects.filter(agenda=agenda).exists() is False


def test_actions_need_post_and_csrf(client_for, submitter, world):
    agenda = world["ready"]
    client = client_for(submitter)
    assert client.get(f"/agendas/{agenda.pk}/abort/").status_code == 405

    client.handler.enforce_csrf_checks = True
    assert client.post(f"/agendas/{agenda.pk}/abort/").status_code == 403

    assert state_of(agenda) == "ready"


def test_unknown_action_is_404(client_for, submitter, world):
    response = client_for(submitter).post(f"/agendas/{world['ready'].pk}/explode/")

    assert response.status_code == 404


# --- agenda detail ---------------------------------------------------------------------------


def test_agenda_detail_draws_the_dag_with_one_node_per_operation_and_reduced_edges(
    client_for, submitter, submit_agenda
):
    agenda = submit_agenda(
        submitter,
        operations=[
            {"name": "probe", "type": "mediainfo", "payload": {}},
            {"name": "measure", "type": "mediainfo", "payload": {"in": "@<probe.out>"}},
            {
                "name": "report",
                "type": "log",
                "payload": {"size": "@<measure.out::/size>"},
                "depends_on": ["probe"],
            },
        ],
    )

    html = text_of(client_for(submitter).get(f"/agendas/{agenda.pk}/"))

    svg = html[
        html.index('<svg class="dag"') : html.index("</svg>", html.index('<svg class="dag"'))
    ]
    assert re.findall(r'data-operation="([^"]+)" data-state="(\w+)"', svg) == [
        ("probe", "waiting"),
        ("measure", "waiting"),
        ("report", "waiting"),
    ]
    # probe → measure → report; the direct probe → report edge is implied and left out.
    assert svg.count('class="edge') == 2
    assert "waiting · 0%" in svg


def test_agenda_detail_lists_operations_and_executions(client_for, submitter, agenda_in_state):
    agenda = agenda_in_state(submitter, "executing", worker="farm-7")

    html = text_of(client_for(submitter).get(f"/agendas/{agenda.pk}/"))

    assert 'id="operations"' in html
    assert 'data-operation="probe"' in html
    assert '<td class="mono">farm-7</td>' in html
    assert '<span class="badge state-running">running</span>' in html


def test_agenda_detail_shows_each_operations_progress_result_and_diagnostics(
    client_for, submitter, submit_agenda, insight
):
    agenda = submit_agenda(submitter)
    insight_fill(insight_id=insight.pk)
    [pulled] = insight_pull(principal=SYSTEM, insight=insight, worker="farm-7", count=1)
    execution_report(
        execution_id=pulled.execution.pk,
        lease_token=pulled.execution.lease_token,
        operations=[
            {"name": "probe", "state": "succeeded", "result": {"size": 4242}},
            {
                "name": "report",
                "state": "executing",
                "percent_complete": 37,
                "diagnostics": [{"message": "disk nearly full", "code": "disk"}],
            },
        ],
    )

    html = text_of(client_for(submitter).get(f"/agendas/{agenda.pk}/"))

    rows = dict(re.findall(r'<tr class="op-row"[^>]*data-operation="(\w+)">(.*?)</tr>', html, re.S))
    assert set(rows) == {"probe", "report"}
    assert "state-succeeded" in rows["probe"] and ">100%<" in rows["probe"]
    assert "<summary>Result</summary>" in rows["probe"] and "4242" in rows["probe"]
    assert "state-executing" in rows["report"] and ">37%<" in rows["report"]
    assert "<summary>Diagnostics</summary>" in rows["report"]
    assert "disk nearly full" in rows["report"]
    assert re.search(r'<td class="num">1</td>', rows["probe"])  # one attempt each
    assert re.search(r'<td class="num">1</td>', rows["report"])
    assert "<time" in rows["probe"]  # started and completed times are shown
    # The DAG is coloured by each operation's own state and percent.
    assert 'data-operation="probe" data-state="succeeded"' in html
    assert 'data-operation="report" data-state="executing"' in html
    assert "executing · 37%" in html


def test_live_partial_is_a_fragment_and_stops_refreshing_when_terminal(
    client_for, submitter, world
):
    client = client_for(submitter)

    running = text_of(client.get(f"/agendas/{world['executing'].pk}/?partial=1"))
    finished = text_of(client.get(f"/agendas/{world['succeeded'].pk}/?partial=1"))

    assert "<html" not in running
    assert "data-refresh-stop" not in running
    assert "data-refresh-stop" in finished


# --- agendas list ----------------------------------------------------------------------------


def listed(response) -> set[str]:
    return set(re.findall(r'data-agenda="([0-9a-f-]+)"', text_of(response)))


def test_agenda_filters(client_for, submitter, world, template, insight):
    client = client_for(submitter)
    ids = {name: str(agenda.pk) for name, agenda in world.items()}

    assert listed(client.get("/agendas/?state=paused")) == {ids["paused"]}
    assert listed(client.get("/agendas/?link_id=batch-1")) == {ids["ready"], ids["succeeded"]}
    assert listed(client.get("/agendas/?text=ext-ready")) == {ids["ready"]}
    # Exact matches only (each served by an index): a fragment finds nothing, a link id does.
    assert listed(client.get("/agendas/?text=ext-re")) == set()
    assert listed(client.get("/agendas/?text=batch-1")) == {ids["ready"], ids["succeeded"]}
    assert listed(client.get(f"/agendas/?text={ids['paused']}")) == {ids["paused"]}
    assert listed(client.get(f"/agendas/?text={ids['paused'][:8]}")) == {ids["paused"]}
    assert listed(client.get(f"/agendas/?insight={insight.pk}")) == set(ids.values())
    assert listed(client.get(f"/agendas/?customer={submitter.customer.pk}")) == set(ids.values())
    assert listed(client.get(f"/agendas/?template={template.pk}")) == set()


def test_agenda_filters_by_customer_and_insight_tell_them_apart(
    client_for, staff_user, submitter, other_submitter, submit_agenda, insight, transcode_insight
):
    ours = submit_agenda(submitter)
    theirs = submit_agenda(other_submitter)
    transcode = [{"name": "encode", "type": "transcode", "payload": {}}]
    ours_transcoded = submit_agenda(submitter, operations=transcode)
    assert ours_transcoded.insight_id == transcode_insight.pk
    client = client_for(staff_user)

    by_customer = listed(client.get(f"/agendas/?customer={submitter.customer.pk}"))
    by_other = listed(client.get(f"/agendas/?customer={other_submitter.customer.pk}"))
    by_insight = listed(client.get(f"/agendas/?insight={transcode_insight.pk}"))
    both = listed(client.get(f"/agendas/?customer={submitter.customer.pk}&insight={insight.pk}"))

    assert by_customer == {str(ours.pk), str(ours_transcoded.pk)}
    assert by_other == {str(theirs.pk)}
    assert by_insight == {str(ours_transcoded.pk)}
    assert both == {str(ours.pk)}


def test_with_more_customers_than_a_select_shows_the_customer_filter_is_typed_by_slug(
    client_for, staff_user, submitter, other_submitter, submit_agenda, pool, monkeypatch
):
    from agendas import forms as agenda_forms

    monkeypatch.setattr(agenda_forms, "CHOICES_SHOWN", 3)
    CustomerFactory.create_batch(3, resource_pool=pool)
    ours, theirs = submit_agenda(submitter), submit_agenda(other_submitter)
    client = client_for(staff_user)

    page = text_of(client.get("/agendas/"))
    by_slug = client.get(f"/agendas/?customer={submitter.customer.slug}")
    by_id = listed(client.get(f"/agendas/?customer={other_submitter.customer.pk}"))
    refreshed = listed(client.get(f"/agendas/?customer={submitter.customer.slug}&partial=1"))
    unknown = text_of(client.get("/agendas/?customer=no-such-customer"))

    assert '<select name="customer"' not in page
    assert 'name="customer"' in page and "Customer (slug or id)" in page
    assert listed(by_slug) == refreshed == {str(ours.pk)}
    assert by_id == {str(theirs.pk)}
    assert "No customer no-such-customer." in unknown


def test_a_customer_filter_typed_by_slug_finds_only_the_users_own_customers(
    client_for, submitter, other_submitter, submit_agenda, monkeypatch
):
    from agendas import forms as agenda_forms

    monkeypatch.setattr(agenda_forms, "CHOICES_SHOWN", 0)
    submit_agenda(other_submitter)

    page = text_of(client_for(submitter).get(f"/agendas/?customer={other_submitter.customer.slug}"))

    assert f"No customer {other_submitter.customer.slug}." in page


def test_the_agenda_page_filtered_only_by_state_counts_progress_rows_without_the_join(
    client_for, submitter, other_submitter, agenda_in_state
):
    from django.db import connection

    mine = agenda_in_state(submitter, "paused")
    agenda_in_state(submitter, "ready")
    agenda_in_state(other_submitter, "paused")
    statements = []

    def record(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    client = client_for(submitter)
    with connection.execute_wrapper(record):
        by_state = listed(client.get("/agendas/?state=paused"))
    by_state_and_text = listed(client.get(f"/agendas/?state=paused&text={mine.pk}"))

    assert by_state == by_state_and_text == {str(mine.pk)}
    counts = [sql for sql in statements if sql.startswith("SELECT COUNT(*) FROM (SELECT")]
    assert len(counts) == 1, statements
    assert '"agendas_agendaprogress"' in counts[0] and '"agendas_agenda"' not in counts[0]


def test_agenda_label_filters_are_anded_and_a_bad_one_says_how_to_write_it(
    client_for, submitter, other_submitter, submit_agenda
):
    both = submit_agenda(submitter, labels={"batch": "42", "kind": "proxy"})
    one = submit_agenda(submitter, labels={"batch": "42"})
    submit_agenda(other_submitter, labels={"batch": "42", "kind": "proxy"})
    client = client_for(submitter)

    assert listed(client.get("/agendas/?label=batch:42")) == {str(both.pk), str(one.pk)}
    assert listed(client.get("/agendas/?label=batch:42&label=kind:proxy")) == {str(both.pk)}
    page = client.get(f"/agendas/{both.pk}/")
    assert "batch: 42" in text_of(page)
    assert "?label=batch:42" in page.content.decode()
    assert "key:value" in text_of(client.get("/agendas/?label=nocolon"))


def test_agenda_filter_by_template(client_for, submitter, template):
    from agendas.template_services import agenda_template_run

    agenda, _ = agenda_template_run(
        principal=submitter.user, template=template, payload={"url": "s3://a"}
    )

    response = client_for(submitter).get(f"/agendas/?template={template.pk}")

    assert listed(response) == {str(agenda.pk)}


def test_agenda_list_paginates_50_a_page(client_for, submitter, submit_agenda):
    for _ in range(52):
        submit_agenda(submitter)
    client = client_for(submitter)

    first = client.get("/agendas/")
    second = client.get("/agendas/?page=2")

    assert len(listed(first)) == 50
    assert len(listed(second)) == 2
    assert "Page 1 of 2 · 52 agendas" in text_of(first)
    assert 'href="?page=2"' in text_of(first)


def test_agenda_table_partial_keeps_the_filters_and_is_a_fragment(client_for, submitter, world):
    page = text_of(client_for(submitter).get("/agendas/?state=paused"))
    assert 'data-refresh-url="/agendas/?state=paused&amp;partial=1"' in page

    partial = client_for(submitter).get("/agendas/?state=paused&partial=1")

    assert "<html" not in text_of(partial)
    assert listed(partial) == {str(world["paused"].pk)}


def test_agenda_list_shows_state_badges_and_progress_bars(client_for, submitter, world):
    html = text_of(client_for(submitter).get("/agendas/"))

    for state in ("ready", "succeeded", "executing", "paused"):
        assert f'<span class="badge state-{state}">{state}</span>' in html
    assert 'role="progressbar"' in html


# --- overview ----------------------------------------------------------------------------------


def metric(html: str, insight_name: str, name: str) -> str:
    row = re.search(rf'<tr data-insight="{insight_name}">(.*?)</tr>', html, re.S).group(1)
    return re.search(rf'data-metric="{name}"[^>]*>([^<]*)<', row).group(1).strip()


def test_overview_numbers_match_the_database(
    client_for, staff_user, submitter, other_submitter, agenda_in_state, submit_agenda, insight
):
    agenda_in_state(submitter, "executing")
    agenda_in_state(other_submitter, "executing")
    agenda_in_state(submitter, "succeeded")
    agenda_in_state(submitter, "failed")
    agenda_in_state(submitter, "queued")
    submit_agenda(submitter)
    submit_agenda(other_submitter)

    html = text_of(client_for(staff_user).get("/"))

    assert metric(html, insight.name, "queued") == "1"
    assert metric(html, insight.name, "queue_size") == str(insight.queue_size)
    assert metric(html, insight.name, "ready") == "2"
    assert metric(html, insight.name, "executing") == "2"
    assert metric(html, insight.name, "succeeded") == "1"
    assert metric(html, insight.name, "failed") == "1"
    assert metric(html, insight.name, "oldest_waiting").endswith(" s")
    assert re.search(r'data-total="throughput">2<', html)
    bars = re.findall(r'data-customer="([^"]+)" data-executing="(\d+)"', html)
    assert sorted(bars) == [("acme", "1"), ("globex", "1")]


def test_overview_hides_other_customers_names_in_the_share_chart(
    client_for, submitter, other_submitter, agenda_in_state
):
    agenda_in_state(submitter, "executing")
    agenda_in_state(other_submitter, "executing")

    html = text_of(client_for(submitter).get("/"))

    bars = re.findall(r'data-customer="([^"]+)" data-executing="(\d+)"', html)
    assert bars == [("acme", "1"), ("other customers", "1")]
    assert "globex" not in html.lower()


def test_overview_lists_open_alerts_of_visible_customers_only(
    client_for, submitter, other_customer, customer
):
    now = timezone.now()
    own = AlertRule.objects.create(
        customer=customer, name="acme-backlog", kind="queue_waiting", threshold=5
    )
    foreign = AlertRule.objects.create(
        customer=other_customer, name="globex-backlog", kind="queue_waiting", threshold=5
    )
    Alert.objects.create(rule=own, customer=customer, value=9, message="9 waiting", opened_at=now)
    Alert.objects.create(rule=foreign, customer=other_customer, value=9, opened_at=now)

    html = text_of(client_for(submitter).get("/"))

    assert "acme-backlog" in html
    assert "globex-backlog" not in html
    assert re.search(r'data-total="alerts">1<', html)


# --- templates ---------------------------------------------------------------------------------


def test_template_preview_shows_the_expanded_agenda(client_for, submitter, template):
    response = client_for(submitter).post(
        f"/templates/{template.pk}/", {"action": "preview", "payload": '{"url": "s3://in/x.mp4"}'}
    )

    html = text_of(response)
    assert response.status_code == 200
    assert "s3://in/x.mp4" in html
    assert "No problem found: it would be accepted." in html
    assert Agenda.objects.exists() is False


def test_the_run_form_starts_from_a_payload_the_schema_accepts(client_for, submitter, template):
    import html as html_module
    import json

    from agendas.payload_schema import payload_errors

    page = client_for(submitter).get(f"/templates/{template.pk}/").content.decode()
    textarea = re.search(r'<textarea[^>]*name="payload"[^>]*>(.*?)</textarea>', page, re.S)
    example = json.loads(html_module.unescape(textarea.group(1)))

    assert set(example) >= set(template.payload_schema.get("required", []))
    assert payload_errors(template.payload_schema, example) == {}


def test_an_example_payload_follows_the_schema_examples_formats_and_required_fields():
    from agendas.payload_example import payload_example

    schema = {
        "type": "object",
        "required": ["url", "height", "renditions", "mode"],
        "properties": {
            "url": {"type": "string", "format": "uri"},
            "height": {"type": "integer", "minimum": 144},
            "renditions": {"type": "array", "minItems": 1, "items": {"examples": [720]}},
            "mode": {"enum": ["fast", "slow"]},
            "optional": {"type": "string"},
        },
    }

    assert payload_example(schema) == {
        "url": "https://example.com/input.mp4",
        "height": 144,
        "renditions": [720],
        "mode": "fast",
    }
    assert payload_example({"examples": [{"url": "s3://x"}]}) == {"url": "s3://x"}
    assert payload_example(None) == {}


def test_template_run_submits_and_redirects_to_the_agenda(client_for, submitter, template):
    response = client_for(submitter).post(
        f"/templates/{template.pk}/",
        {"action": "run", "payload": '{"url": "s3://in/x.mp4"}', "link_id": "from-page"},
        follow=True,
    )

    agenda = Agenda.objects.get()
    assert response.redirect_chain == [(f"/agendas/{agenda.pk}/", 302)]
    assert (agenda.template_id, agenda.link_id, agenda.customer_id) == (
        template.pk,
        "from-page",
        submitter.customer.pk,
    )
    assert agenda.operations[0]["payload"] == {"url": "s3://in/x.mp4"}
    assert f"Agenda {agenda.pk} submitted." in text_of(response)


def field_errors(html: str, field: str) -> list[str]:
    block = re.search(rf'<label for="id_{field}">.*?</div>', html, re.S).group(0)
    return re.findall(r"<li>(.*?)</li>", block)


def test_template_run_with_invalid_json_shows_the_error_next_to_the_payload(
    client_for, submitter, template
):
    response = client_for(submitter).post(
        f"/templates/{template.pk}/", {"action": "run", "payload": '{"url": '}
    )

    assert response.status_code == 200
    assert field_errors(text_of(response), "payload") == [
        "Not valid JSON: Expecting value (line 1, column 8)."
    ]
    assert Agenda.objects.exists() is False


def test_template_run_with_a_payload_the_schema_refuses_shows_the_path(
    client_for, submitter, template
):
    response = client_for(submitter).post(
        f"/templates/{template.pk}/", {"action": "run", "payload": '{"url": 5}'}
    )

    assert field_errors(text_of(response), "payload") == [
        "url: 5 is not of type &#x27;string&#x27;"
    ]
    assert Agenda.objects.exists() is False


def test_template_run_with_a_bad_priority_shows_it_next_to_the_field(
    client_for, submitter, template
):
    response = client_for(submitter).post(
        f"/templates/{template.pk}/", {"action": "run", "payload": '{"url": "u"}', "priority": "12"}
    )

    assert field_errors(text_of(response), "priority") == [
        "Ensure this value is less than or equal to 9."
    ]
    assert Agenda.objects.exists() is False


def test_staff_must_choose_a_customer_to_run_a_template(client_for, staff_user, template, customer):
    client = client_for(staff_user)

    refused = client.post(
        f"/templates/{template.pk}/", {"action": "run", "payload": '{"url": "u"}'}
    )
    assert field_errors(text_of(refused), "customer") == [
        "This field is required for staff submissions."
    ]

    client.post(
        f"/templates/{template.pk}/",
        {"action": "run", "payload": '{"url": "u"}', "customer": str(customer.pk)},
    )
    assert Agenda.objects.get().customer_id == customer.pk


def test_viewer_sees_no_run_button_and_cannot_run(client_for, viewer, template):
    client = client_for(viewer)

    html = text_of(client.get(f"/templates/{template.pk}/"))
    assert 'value="run"' not in html
    assert 'value="preview"' in html

    response = client.post(
        f"/templates/{template.pk}/", {"action": "run", "payload": '{"url": "u"}'}
    )
    assert "Running a template needs the submitter role." in text_of(response)
    assert Agenda.objects.exists() is False


def test_shared_template_of_another_customer_is_visible(client_for, other_submitter, customer):
    shared = AgendaTemplateFactory(customer=customer, name="shared-one", is_global=True)

    assert client_for(other_submitter).get(f"/templates/{shared.pk}/").status_code == 200


# --- schedules ---------------------------------------------------------------------------------


def test_schedule_admin_pauses_and_resumes(client_for, admin_member, schedule):
    client = client_for(admin_member)

    paused = client.post(f"/schedules/{schedule.pk}/pause/", {"next": "list"}, follow=True)
    assert paused.redirect_chain == [("/schedules/", 302)]
    assert Schedule.objects.get(pk=schedule.pk).state == "paused"
    assert "Schedule nightly paused." in text_of(paused)

    resumed = client.post(f"/schedules/{schedule.pk}/resume/", follow=True)
    assert Schedule.objects.get(pk=schedule.pk).state == "active"
    assert "Schedule nightly resumed; next run" in text_of(resumed)


def test_schedule_pause_twice_flashes_the_409_reason(client_for, admin_member, schedule):
    client = client_for(admin_member)
    client.post(f"/schedules/{schedule.pk}/pause/")

    response = client.post(f"/schedules/{schedule.pk}/pause/", follow=True)

    assert (
        "Refused (409): Schedule nightly is paused; only an active one can be paused."
        in text_of(response)
    )


def test_schedule_buttons_follow_roles(client_for, viewer, submitter, admin_member, schedule):
    def forms(principal):
        html = text_of(client_for(principal).get(f"/schedules/{schedule.pk}/"))
        return set(re.findall(r'action="/schedules/[0-9a-f-]+/(\w+)/"', html))

    assert forms(viewer) == set()
    assert forms(submitter) == {"trigger"}
    assert forms(admin_member) == {"pause", "trigger"}


def test_schedule_pause_by_a_submitter_is_403_and_changes_nothing(client_for, submitter, schedule):
    response = client_for(submitter).post(f"/schedules/{schedule.pk}/pause/")

    assert response.status_code == 403
    assert Schedule.objects.get(pk=schedule.pk).state == "active"


def test_schedule_run_now_submits_an_agenda_listed_as_a_run(client_for, submitter, schedule):
    client = client_for(submitter)

    client.post(f"/schedules/{schedule.pk}/trigger/")

    agenda = Agenda.objects.get()
    assert agenda.schedule_id == schedule.pk
    html = text_of(client.get(f"/schedules/{schedule.pk}/"))
    assert str(agenda.pk)[:8] in html
    assert 'Runs <span class="muted small">(1)' in html


def test_schedule_list_shows_next_run_and_state(client_for, admin_member, schedule):
    html = text_of(client_for(admin_member).get("/schedules/"))

    assert '<tr data-schedule="nightly">' in html
    assert '<span class="badge state-active">active</span>' in html
    assert schedule.next_run_at.strftime("%H:%M") in html


# --- pools and progress ------------------------------------------------------------------------


def test_pools_page_shows_configuration_depths_and_workers_seen(
    client_for, staff_user, submitter, agenda_in_state, insight
):
    agenda_in_state(submitter, "executing", worker="farm-node-3")
    agenda_in_state(submitter, "ready")

    html = text_of(client_for(staff_user).get("/pools/"))

    assert f'id="insight-{insight.pk}"' in html
    assert "round robin" in html
    assert '<tr data-worker="farm-node-3">' in html
    section = html[html.index(f'id="insight-{insight.pk}"') :]
    assert re.search(r'data-metric="ready">1<', section)
    assert re.search(r'data-metric="executing">1<', section)


def test_progress_summary_page(client_for, submitter, agenda_in_state):
    agenda_in_state(submitter, "succeeded", link_id="job-9")
    agenda_in_state(submitter, "ready", link_id="job-9")

    html = text_of(client_for(submitter).get("/progress/?link_id=job-9"))

    assert '<dd id="summary-state"><span class="badge state-executing">executing</span>' in html
    assert "50%" in html
    assert html.count('href="/agendas/') >= 2


def test_the_progress_page_of_an_unknown_or_foreign_link_id_says_there_are_none(
    client_for, submitter, other_submitter, agenda_in_state
):
    agenda_in_state(other_submitter, "succeeded", link_id="theirs")

    for link_id in ("no-such-batch", "theirs"):
        response = client_for(submitter).get(f"/progress/?link_id={link_id}")
        html = text_of(response)

        assert response.status_code == 404
        assert "No visible agenda has this link id." in html
        assert "summary-state" not in html


# --- query counts ------------------------------------------------------------------------------


LIST_PAGES = [
    "/",
    "/agendas/",
    "/agendas/?partial=1",
    "/templates/",
    "/schedules/",
    "/pools/",
    "/progress/?link_id=show-1",
]


@pytest.mark.parametrize("who", ["staff_user", "submitter"])
@pytest.mark.parametrize("url", LIST_PAGES)
def test_list_pages_cost_a_bounded_number_of_queries(
    url,
    who,
    request,
    client_for,
    submitter,
    agenda_in_state,
    template,
    django_assert_max_num_queries,
):
    client = client_for(request.getfixturevalue(who))

    def grow(n: int) -> None:
        for index in range(n):
            agenda_in_state(submitter, "executing", worker=f"w{index}", link_id="show-1")
            agenda_in_state(submitter, "succeeded", link_id="show-1")
            agenda_in_state(submitter, "ready", link_id="show-1")
            AgendaTemplateFactory(customer=submitter.customer)
            schedule_create(
                principal=SYSTEM,
                customer=submitter.customer,
                template=template,
                name=f"s{Schedule.objects.count()}",
                cron="* * * * *",
                payload={"url": "u"},
            )

    grow(1)
    with CaptureQueriesContext(connection) as small:
        assert client.get(url).status_code == 200
    grow(6)
    with django_assert_max_num_queries(14):
        assert client.get(url).status_code == 200
    with CaptureQueriesContext(connection) as large:
        client.get(url)

    assert len(large) == len(small)


def test_agenda_detail_cost_does_not_grow_with_operations_or_executions(
    client_for, staff_user, submitter, submit_agenda, django_assert_max_num_queries
):
    many = [{"name": f"op{index}", "type": "log", "payload": {}} for index in range(40)]
    agenda = submit_agenda(submitter, operations=many)
    client = client_for(staff_user)

    with django_assert_max_num_queries(8):
        assert client.get(f"/agendas/{agenda.pk}/").status_code == 200


def test_workers_seen_window_skips_old_finished_executions(submitter, agenda_in_state, insight):
    from scheduling.selectors import workers_seen

    agenda_in_state(submitter, "succeeded", worker="old-node")

    later = timezone.now() + timedelta(hours=25)
    assert workers_seen(insight_ids=[insight.pk], now=later) == {}
    assert [worker.name for worker in workers_seen(insight_ids=[insight.pk])[insight.pk]] == [
        "old-node"
    ]


def test_the_favicon_is_ours_for_every_page_even_those_that_do_not_name_it(client):
    answer = client.get("/favicon.ico")

    assert answer.status_code == 301
    assert answer["Location"].endswith("/static/favicon.svg")
