"""The authorization rules of docs/design.md §10.3 across endpoints, as matrices (issue 4).

Read-only endpoints have no verb a role could be too low for: `viewer` is the lowest role
that reads, and a `worker` sees nothing but what pulling needs (docs/decisions.md "Roles"),
so its own customer's agendas, progress, executions and alerts are an empty list or a 404,
never a 403. Writes to them are 405 for everyone, staff included.
"""

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.utils import timezone

from accounts.models import ApiToken
from accounts.services import token_issue
from agendas.models import Agenda
from core.principals import SYSTEM
from resourcepools.models import Customer, Insight, Membership, ResourcePool
from scheduling.models import Alert, AlertRule, Schedule
from tests.factories import InsightFactory, ResourcePoolFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


def members_url(customer, member, suffix=""):
    return f"/api/v1/customers/{customer.pk}/members/{member.pk}/{suffix}"


def world() -> tuple:
    """Every row the refused writes below could have changed."""
    return (
        sorted(Customer.objects.values_list("pk", "name", "is_active", "updated_at")),
        sorted(Membership.objects.values_list("pk", "customer_id", "role", "updated_at")),
        sorted(ApiToken.objects.values_list("user_id", "digest")),
        sorted(ResourcePool.objects.values_list("pk", "description", "updated_at")),
        sorted(Insight.objects.values_list("pk", "queue_size", "updated_at")),
        sorted(Schedule.objects.values_list("pk", "cron", "state", "updated_at")),
        Agenda.objects.count(),
    )


# --- read-only endpoints: who reads what ---------------------------------------------------


@dataclass
class Activity:
    agenda: Agenda
    alert: Alert


def open_alert(customer) -> Alert:
    rule = AlertRule.objects.create(
        customer=customer, name=f"{customer.slug} backlog", kind="queue_waiting", threshold=5
    )
    return Alert.objects.create(
        rule=rule, customer=customer, value=9, message="9 waiting", opened_at=timezone.now()
    )


@pytest.fixture
def activity(customer, other_customer, submitter, other_submitter, agenda_in_state) -> Activity:
    """Acme: one executing agenda (two operations, one execution) and one alert; Globex the
    same kind of rows under the same link_id, which no Acme member may ever see."""
    agenda_in_state(other_submitter, "paused", link_id="job-1")
    open_alert(other_customer)
    return Activity(
        agenda=agenda_in_state(submitter, "executing", link_id="job-1"), alert=open_alert(customer)
    )


@pytest.fixture
def customer_worker(customer, make_principal):
    """A `worker` member of Acme itself (the shared `worker` fixture belongs to the farm)."""
    return make_principal(customer, Role.WORKER)


def rows_seen(response) -> int:
    if response.status_code == 404:
        return 0
    body = response.json()
    if "results" in body:
        return body["count"]
    if "agendas" in body:  # progress-summary
        return len(body["agendas"])
    return 1


# (url of Acme's activity, (status, rows) for an Acme viewer, the same for an Acme worker)
READS: list = [
    pytest.param(lambda a: "/api/v1/agenda-progress/", (200, 1), (200, 0), id="agenda-progress"),
    pytest.param(
        lambda a: f"/api/v1/agenda-progress/{a.agenda.progress.pk}/",
        (200, 1),
        (404, 0),
        id="agenda-progress-detail",
    ),
    pytest.param(
        lambda a: "/api/v1/operation-progress/", (200, 2), (200, 0), id="operation-progress"
    ),
    pytest.param(
        lambda a: f"/api/v1/operation-progress/{a.agenda.progress.operations.first().pk}/",
        (200, 1),
        (404, 0),
        id="operation-progress-detail",
    ),
    pytest.param(
        lambda a: "/api/v1/progress-summary/?link_id=job-1",
        (200, 1),
        (404, 0),  # no visible agenda with that link id: 404, never "complete at 0 %"
        id="progress-summary",
    ),
    pytest.param(
        lambda a: f"/api/v1/agendas/{a.agenda.pk}/executions/", (200, 1), (404, 0), id="executions"
    ),
    pytest.param(lambda a: "/api/v1/alerts/", (200, 1), (200, 0), id="alerts"),
    pytest.param(lambda a: f"/api/v1/alerts/{a.alert.pk}/", (200, 1), (404, 0), id="alert-detail"),
]


@pytest.mark.parametrize(("url", "as_viewer", "as_worker"), READS)
def test_a_viewer_reads_its_customers_rows_and_a_worker_of_the_same_customer_sees_none(
    url: Callable,
    as_viewer: tuple,
    as_worker: tuple,
    activity,
    viewer,
    customer_worker,
    api_client_for,
):
    path = url(activity)

    read = api_client_for(viewer).get(path)
    by_worker = api_client_for(customer_worker).get(path)

    assert (read.status_code, rows_seen(read)) == as_viewer
    assert (by_worker.status_code, rows_seen(by_worker)) == as_worker


def test_the_pool_owners_worker_reads_its_queues(activity, worker, insight, api_client_for):
    """Pullers need the queues of the pools their customer owns (docs/design.md §6.3)."""
    response = api_client_for(worker).get("/api/v1/queues/")

    assert response.status_code == 200
    (queue,) = response.json()["results"]
    assert (queue["insight"], queue["executing"]) == (str(insight.pk), 1)


def test_a_worker_cannot_preview_its_customers_template(
    customer_worker, viewer, template, api_client_for
):
    """Preview only reads (any reader of the template may preview); a worker reads nothing."""
    url = f"/api/v1/agenda-templates/{template.pk}/preview/"
    body = {"payload": {"url": "s3://in/x.mp4"}}

    by_worker = api_client_for(customer_worker).post(url, body, format="json")
    by_viewer = api_client_for(viewer).post(url, body, format="json")

    assert by_worker.status_code == 404
    assert by_viewer.status_code == 200
    assert not Agenda.objects.exists()


READ_ONLY_WRITES: list = [
    pytest.param("post", lambda a: "/api/v1/agenda-progress/", id="agenda-progress-post"),
    pytest.param(
        "patch",
        lambda a: f"/api/v1/agenda-progress/{a.agenda.progress.pk}/",
        id="agenda-progress-patch",
    ),
    pytest.param(
        "delete",
        lambda a: f"/api/v1/agenda-progress/{a.agenda.progress.pk}/",
        id="agenda-progress-delete",
    ),
    pytest.param(
        "patch",
        lambda a: f"/api/v1/operation-progress/{a.agenda.progress.operations.first().pk}/",
        id="operation-progress-patch",
    ),
    pytest.param("post", lambda a: "/api/v1/progress-summary/", id="progress-summary-post"),
    pytest.param(
        "post", lambda a: f"/api/v1/agendas/{a.agenda.pk}/executions/", id="executions-post"
    ),
    pytest.param("delete", lambda a: f"/api/v1/queues/{a.agenda.insight_id}/", id="queue-delete"),
    pytest.param("patch", lambda a: f"/api/v1/alerts/{a.alert.pk}/", id="alert-patch"),
]


@pytest.mark.parametrize(("method", "url"), READ_ONLY_WRITES)
def test_read_only_endpoints_refuse_writes_even_to_staff(
    method: str, url: Callable, activity, staff_client, snapshot
):
    before = snapshot(activity.agenda)
    alert_before = Alert.objects.values().get(pk=activity.alert.pk)

    response = getattr(staff_client, method)(url(activity), {"state": "succeeded"}, format="json")

    assert response.status_code == 405
    assert snapshot(activity.agenda) == before
    assert Alert.objects.values().get(pk=activity.alert.pk) == alert_before


# --- refused writes: another customer's row is 404, a too-low role 403, nothing changes ----


@dataclass
class Rows:
    customer: Customer
    other_customer: Customer
    viewer_member: Membership
    foreign_member: Membership
    foreign_pool: ResourcePool
    foreign_insight: Insight
    pool: ResourcePool
    insight: Insight


@pytest.fixture
def rows(customer, other_customer, viewer, other_submitter, pool, insight) -> Rows:
    """Acme's viewer and Globex's submitter hold tokens; Globex owns a pool Acme cannot see."""
    for principal in (viewer, other_submitter):
        token_issue(principal=SYSTEM, user=principal.user, name="laptop")
    foreign_pool = ResourcePoolFactory(name="globex-farm", owner=other_customer)
    return Rows(
        customer=customer,
        other_customer=other_customer,
        viewer_member=Membership.objects.get(user=viewer.user),
        foreign_member=Membership.objects.get(user=other_submitter.user),
        foreign_pool=foreign_pool,
        foreign_insight=InsightFactory(resource_pool=foreign_pool, name="gx", is_global=False),
        pool=pool,
        insight=insight,
    )


# (caller, method, url, body, status)
REFUSED: list = [
    # another customer's rows: 404, through its own URL and through the caller's customer
    pytest.param(
        "admin",
        "patch",
        lambda r: members_url(r.other_customer, r.foreign_member),
        {"role": "admin"},
        404,
        id="member-patch-foreign",
    ),
    pytest.param(
        "admin",
        "patch",
        lambda r: members_url(r.customer, r.foreign_member),
        {"role": "admin"},
        404,
        id="member-patch-foreign-through-own-customer",
    ),
    pytest.param(
        "admin",
        "put",
        lambda r: members_url(r.other_customer, r.foreign_member),
        {"role": "admin"},
        404,
        id="member-put-foreign",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: members_url(r.other_customer, r.foreign_member),
        None,
        404,
        id="member-delete-foreign",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: members_url(r.customer, r.foreign_member),
        None,
        404,
        id="member-delete-foreign-through-own-customer",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: members_url(r.other_customer, r.foreign_member, "token/"),
        None,
        404,
        id="token-delete-foreign",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: members_url(r.customer, r.foreign_member, "token/"),
        None,
        404,
        id="token-delete-foreign-through-own-customer",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: f"/api/v1/resource-pools/{r.foreign_pool.pk}/",
        None,
        404,
        id="pool-delete-foreign",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: f"/api/v1/insights/{r.foreign_insight.pk}/",
        None,
        404,
        id="insight-delete-foreign",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: f"/api/v1/customers/{r.other_customer.pk}/",
        None,
        404,
        id="customer-delete-foreign",
    ),
    # visible rows, role too low: 403
    pytest.param(
        "submitter",
        "patch",
        lambda r: members_url(r.customer, r.viewer_member),
        {"role": "admin"},
        403,
        id="member-patch-by-submitter",
    ),
    pytest.param(
        "submitter",
        "delete",
        lambda r: members_url(r.customer, r.viewer_member),
        None,
        403,
        id="member-delete-by-submitter",
    ),
    pytest.param(
        "submitter",
        "delete",
        lambda r: members_url(r.customer, r.viewer_member, "token/"),
        None,
        403,
        id="token-delete-by-submitter",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: f"/api/v1/resource-pools/{r.pool.pk}/",
        None,
        403,
        id="pool-delete-by-a-customer-of-the-pool",
    ),
    pytest.param(
        "admin",
        "delete",
        lambda r: f"/api/v1/insights/{r.insight.pk}/",
        None,
        403,
        id="insight-delete-by-a-customer-of-the-pool",
    ),
    pytest.param(
        "viewer",
        "delete",
        lambda r: f"/api/v1/customers/{r.customer.pk}/",
        None,
        403,
        id="customer-delete-by-its-viewer",
    ),
]


@pytest.mark.parametrize(("caller", "method", "url", "body", "status"), REFUSED)
def test_refused_writes_change_nothing(
    caller: str,
    method: str,
    url: Callable,
    body: dict | None,
    status: int,
    rows,
    admin_client,
    client,
    viewer_client,
):
    api = {"admin": admin_client, "submitter": client, "viewer": viewer_client}[caller]
    before = world()

    response = getattr(api, method)(url(rows), body, format="json")

    assert response.status_code == status, response.json()
    assert set(response.json()) == {"detail"}
    assert world() == before


def test_operation_progress_never_lists_another_customers_operations(
    client, staff_client, submitter, other_submitter, agenda_in_state
):
    mine = agenda_in_state(submitter, "ready")
    foreign = agenda_in_state(other_submitter, "ready")

    listed = client.get("/api/v1/operation-progress/", {"limit": 1000}).json()
    by_foreign_agenda = client.get("/api/v1/operation-progress/", {"agenda": str(foreign.pk)})
    by_name = client.get("/api/v1/operation-progress/", {"name": "probe"}).json()
    everything = staff_client.get("/api/v1/operation-progress/").json()

    assert {row["agenda"] for row in listed["results"]} == {str(mine.pk)}
    assert listed["count"] == 2
    assert (by_foreign_agenda.status_code, by_foreign_agenda.json()["count"]) == (200, 0)
    assert [row["agenda"] for row in by_name["results"]] == [str(mine.pk)]
    assert {row["agenda"] for row in everything["results"]} == {str(mine.pk), str(foreign.pk)}


# --- happy paths and 400s the per-resource files lacked ------------------------------------


def test_the_pool_owners_admin_deletes_an_unused_insight(
    api_client_for, pool_owner, make_principal, insight, transcode_insight
):
    farm_admin = api_client_for(make_principal(pool_owner, Role.ADMIN))

    response = farm_admin.delete(f"/api/v1/insights/{transcode_insight.pk}/")

    assert response.status_code == 204
    assert list(Insight.objects.values_list("name", flat=True)) == ["mediainfo"]
    assert farm_admin.get(f"/api/v1/insights/{transcode_insight.pk}/").status_code == 404


def test_a_schedule_patch_with_a_bad_cron_is_400_naming_cron_and_changes_nothing(
    admin_client, template
):
    created = admin_client.post(
        "/api/v1/schedules/",
        {
            "name": "nightly",
            "template": str(template.pk),
            "payload": {"url": "s3://in/a.mp4"},
            "cron": "30 2 * * *",
        },
        format="json",
    )
    assert created.status_code == 201, created.json()
    schedule = Schedule.objects.get(pk=created.json()["id"])
    before = (schedule.cron, schedule.next_run_at, schedule.updated_at)

    response = admin_client.patch(
        f"/api/v1/schedules/{schedule.pk}/", {"cron": "61 * * * *"}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["cron"])
    schedule.refresh_from_db()
    assert (schedule.cron, schedule.next_run_at, schedule.updated_at) == before
