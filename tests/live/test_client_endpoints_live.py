"""PopClient's management methods against the live server: the effects are read in the database.

Pools and insights, members and their tokens, schedule update/delete, and the callback outbox
(a real delivery attempt by the cluster, then a redelivery).
"""

import pytest

from popclient.client import PopClient
from popclient.errors import Forbidden, NotFound, Unauthorized
from resourcepools.models import Customer, Insight, Membership, ResourcePool
from scheduling.models import CallbackDelivery, Schedule
from tests.live.conftest import committed, wait_for

pytestmark = pytest.mark.django_db


def test_pool_and_insight_create_update_delete(tenant):
    # Pools are the operator's: a customer's admin may not create one (it would list for
    # every customer it serves).
    admin = tenant.client(tenant.staff_token)
    name = f"{tenant.name}-own"

    for token in (tenant.viewer_token, tenant.admin_token):
        with pytest.raises(Forbidden):
            tenant.client(token).create_resource_pool(name=name, owner=tenant.customer_id)
    assert not ResourcePool.objects.filter(name=name).exists()

    pool = admin.create_resource_pool(name=name, owner=tenant.customer_id, description="mine")
    row = ResourcePool.objects.get(pk=pool["id"])
    assert (row.name, str(row.owner_id), row.description) == (name, tenant.customer_id, "mine")

    insight = admin.create_insight(
        resource_pool=pool["id"], name="gpu", mappers={"operation_type": ["log"]}, queue_size=3
    )
    assert insight["resource_pool"] == pool["id"]
    updated = admin.update_insight(insight["id"], queue_size=7)
    assert updated["queue_size"] == 7
    stored = Insight.objects.get(pk=insight["id"])
    assert (str(stored.resource_pool_id), stored.queue_size) == (pool["id"], 7)
    assert stored.mappers == {"operation_type": ["log"]}
    assert admin.get_queue(insight["id"])["queue_size"] == 7
    listed = admin.list_resource_pools(owner=tenant.customer_id)["results"]
    assert [p["id"] for p in listed] == [pool["id"]]

    admin.update_resource_pool(pool["id"], description="renamed")
    assert ResourcePool.objects.get(pk=pool["id"]).description == "renamed"

    assert admin.delete_insight(insight["id"]) is None
    assert not Insight.objects.filter(pk=insight["id"]).exists()
    admin.delete_resource_pool(pool["id"])
    assert not ResourcePool.objects.filter(pk=pool["id"]).exists()
    with pytest.raises(NotFound):
        admin.get_resource_pool(pool["id"])


def test_member_add_token_issue_role_change_revoke_and_remove(tenant):
    admin = tenant.client()
    customer = tenant.customer_id
    username = f"{tenant.name}-newbie"

    member = admin.add_member(customer, username, "submitter")
    row = Membership.objects.get(pk=member["id"])
    assert (row.user.username, str(row.customer_id), row.role) == (username, customer, "submitter")
    assert member["id"] in [m["id"] for m in admin.list_members(customer)["results"]]
    with pytest.raises(Forbidden):
        tenant.client(tenant.viewer_token).list_members(customer)

    issued = admin.issue_token(customer, member["id"])
    assert issued["username"] == username
    newbie = PopClient(tenant.url, issued["token"], timeout=30)
    tenant.clients.append(newbie)
    assert newbie.get_customer(customer)["id"] == customer

    changed = admin.update_member(customer, member["id"], role="viewer")
    assert changed["role"] == "viewer"
    assert Membership.objects.get(pk=member["id"]).role == "viewer"
    with pytest.raises(Forbidden):  # a viewer may not submit
        newbie.submit_agenda({"operations": [{"name": "a", "type": "log"}]})

    assert admin.revoke_token(customer, member["id"]) == 1
    with pytest.raises(Unauthorized):
        newbie.get_customer(customer)
    assert admin.revoke_token(customer, member["id"]) == 0

    assert admin.remove_member(customer, member["id"]) is None
    assert not Membership.objects.filter(pk=member["id"]).exists()
    with pytest.raises(NotFound):
        admin.get_member(customer, member["id"])


def test_schedule_update_and_delete(tenant):
    admin = tenant.client()
    schedule = admin.create_schedule(
        name="yearly",
        template=tenant.template_id,
        cron="0 0 1 1 *",
        payload={"who": "nobody"},
    )
    first_run = Schedule.objects.get(pk=schedule["id"]).next_run_at

    updated = admin.update_schedule(schedule["id"], cron="*/5 * * * *", payload={"who": "ops"})

    assert updated["cron"] == "*/5 * * * *"
    stored = Schedule.objects.get(pk=schedule["id"])
    assert (stored.cron, stored.payload) == ("*/5 * * * *", {"who": "ops"})
    assert stored.next_run_at < first_run  # recomputed from the new cron
    assert stored.next_run_at.minute % 5 == 0

    assert admin.delete_schedule(schedule["id"]) is None
    assert not Schedule.objects.filter(pk=schedule["id"]).exists()
    with pytest.raises(NotFound):
        admin.get_schedule(schedule["id"])


def test_callback_deliveries_list_get_and_redeliver(tenant):
    admin = tenant.client()
    public = "https://hooks.example.com/pop"
    assert admin.update_customer(tenant.customer_id, callback_url=public)["callback_url"] == public
    assert Customer.objects.get(pk=tenant.customer_id).callback_url == public
    # A private address (the API refuses to store one; a row from before the guard, or a name
    # that resolves there): the cluster refuses to POST there (POP_CALLBACK_ALLOW_PRIVATE is
    # off), so its attempt marks the delivery failed at once, without any network.
    hook = "http://127.0.0.1:9/pop-hook"
    committed(lambda: Customer.objects.filter(pk=tenant.customer_id).update(callback_url=hook))

    agenda = admin.submit_agenda({"operations": [{"name": "a", "type": "log"}]})
    admin.abort_agenda(agenda["id"])  # queued, no worker: aborted at once

    page = admin.list_callback_deliveries(agenda=agenda["id"])
    assert [d["event"] for d in page["results"]] == ["aborted"]
    delivery_id = page["results"][0]["id"]
    assert admin.list_callback_deliveries(agenda=agenda["id"], event="executing")["count"] == 0

    def failed():
        row = CallbackDelivery.objects.get(pk=delivery_id)
        return row if row.status == "failed" else None

    row = wait_for(failed, timeout=15, what="the cluster's delivery attempt")
    assert (row.url, row.attempts) == (hook, 1) and row.last_error
    seen = admin.get_callback_delivery(delivery_id)
    assert (seen["status"], seen["attempts"], seen["url"]) == ("failed", 1, hook)

    with pytest.raises(Forbidden):
        tenant.client(tenant.viewer_token).redeliver_callback(delivery_id)
    assert CallbackDelivery.objects.get(pk=delivery_id).status == "failed"
    again = admin.redeliver_callback(delivery_id)

    assert (again["status"], again["attempts"], again["last_error"]) == ("pending", 0, "")
    # A failed row is never tried again on its own: a second attempt is the redelivery's.
    retried = wait_for(failed, timeout=15, what="the redelivered attempt")
    assert retried.attempts == 1 and retried.updated_at > row.updated_at
