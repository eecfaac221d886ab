"""A customer admin's writes stay inside its own customers: no pool, global insight, sharing
or member of its making reaches another customer, and no answer leaks another customer's
users (their e-mail, or whether their username exists)."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission

from agendas.models import Agenda, AgendaTemplate
from resourcepools.models import Insight, Membership, ResourcePool
from tests.factories import CustomerFactory, InsightFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role
REFUSED_USERNAME = {"username": ["This username cannot be used."]}


@pytest.fixture
def acme_admin(customer, make_principal):
    return make_principal(customer, Role.ADMIN)


@pytest.fixture
def acme_admin_client(acme_admin, api_client_for):
    return api_client_for(acme_admin)


@pytest.fixture
def farm_admin_client(pool_owner, make_principal, api_client_for):
    """An admin of FarmCo, the customer that owns the pool Acme and Globex use."""
    return api_client_for(make_principal(pool_owner, Role.ADMIN))


@pytest.fixture
def globex_client(other_customer, make_principal, api_client_for):
    return api_client_for(make_principal(other_customer, Role.VIEWER))


@pytest.fixture
def outsider(db):
    """A customer that uses none of FarmCo's pools, with a viewer."""
    customer = CustomerFactory(slug="initech", name="Initech")
    user = UserFactory(username="initech-viewer")
    MembershipFactory(user=user, customer=customer, role=Role.VIEWER)
    return customer


def names(client, path):
    return [row["name"] for row in client.get(path).json()["results"]]


def members_url(customer):
    return f"/api/v1/customers/{customer.pk}/members/"


# --- pools and global insights -------------------------------------------------------------


def test_a_customer_admin_cannot_create_a_pool_that_other_customers_would_list(
    acme_admin_client, globex_client, pool
):
    response = acme_admin_client.post(
        "/api/v1/resource-pools/", {"owner": "acme", "name": "acme-farm"}, format="json"
    )

    assert response.status_code == 403
    assert list(ResourcePool.objects.values_list("name", flat=True)) == ["farm"]
    assert names(globex_client, "/api/v1/resource-pools/") == ["farm"]


def test_a_pool_owners_admin_cannot_create_a_global_insight(
    farm_admin_client, api_client_for, outsider, pool
):
    response = farm_admin_client.post(
        "/api/v1/insights/",
        {"resource_pool": "farm", "name": "everyone", "is_global": True},
        format="json",
    )

    assert response.status_code == 403
    assert "is_global" in response.json()["detail"]
    assert not Insight.objects.filter(name="everyone").exists()
    outsider_viewer = get_user_model().objects.get(username="initech-viewer")
    assert names(api_client_for(outsider_viewer), "/api/v1/insights/") == []


def test_a_pool_owners_admin_cannot_make_an_insight_global_or_restricted_again(
    farm_admin_client, pool
):
    private = InsightFactory(resource_pool=pool, name="private", is_global=False, queue_size=5)
    public = InsightFactory(resource_pool=pool, name="public", is_global=True, queue_size=5)

    widened = farm_admin_client.patch(
        f"/api/v1/insights/{private.pk}/", {"is_global": True, "queue_size": 9}, format="json"
    )
    narrowed = farm_admin_client.patch(
        f"/api/v1/insights/{public.pk}/", {"is_global": False}, format="json"
    )

    assert (widened.status_code, narrowed.status_code) == (403, 403)
    private.refresh_from_db()
    public.refresh_from_db()
    assert (private.is_global, private.queue_size) == (False, 5)
    assert public.is_global is True


def test_a_pool_owners_admin_still_manages_its_insights_without_touching_is_global(
    farm_admin_client, pool
):
    insight = InsightFactory(resource_pool=pool, name="gpu", is_global=True, queue_size=5)
    created = farm_admin_client.post(
        "/api/v1/insights/", {"resource_pool": "farm", "name": "cpu"}, format="json"
    )
    unchanged_flag = farm_admin_client.patch(
        f"/api/v1/insights/{insight.pk}/", {"is_global": True, "queue_size": 7}, format="json"
    )

    assert (created.status_code, created.json()["is_global"]) == (201, False)
    assert unchanged_flag.status_code == 200
    insight.refresh_from_db()
    assert (insight.is_global, insight.queue_size) == (True, 7)


def test_staff_create_a_pool_and_a_global_insight_every_customer_lists(
    api_client_for, staff_user, pool_owner, outsider
):
    staff = api_client_for(staff_user)

    pool = staff.post(
        "/api/v1/resource-pools/", {"owner": "farmco", "name": "shared"}, format="json"
    )
    insight = staff.post(
        "/api/v1/insights/",
        {"resource_pool": "shared", "name": "everyone", "is_global": True},
        format="json",
    )

    assert (pool.status_code, insight.status_code) == (201, 201)
    outsider_viewer = get_user_model().objects.get(username="initech-viewer")
    assert names(api_client_for(outsider_viewer), "/api/v1/insights/") == ["everyone"]


def test_a_pool_owners_admin_cannot_share_an_insight_with_a_customer_outside_the_pool(
    farm_admin_client, api_client_for, outsider, customer, pool
):
    created = farm_admin_client.post(
        "/api/v1/insights/",
        {
            "resource_pool": "farm",
            "name": "spam",
            "is_global": False,
            "allowed_customers": [str(outsider.pk)],
        },
        format="json",
    )
    insight = InsightFactory(resource_pool=pool, name="gpu", is_global=False)
    insight.allowed_customers.set([customer])
    widened = farm_admin_client.patch(
        f"/api/v1/insights/{insight.pk}/",
        {"allowed_customers": [str(customer.pk), str(outsider.pk)]},
        format="json",
    )

    assert (created.status_code, list(created.json())) == (400, ["allowed_customers.0"])
    assert (widened.status_code, list(widened.json())) == (400, ["allowed_customers.1"])
    assert (
        created.json()["allowed_customers.0"]
        == widened.json()["allowed_customers.1"]
        == [f"No customer {outsider.pk} is visible to you."]
    )
    assert not Insight.objects.filter(name="spam").exists()
    assert list(insight.allowed_customers.all()) == [customer]
    outsider_viewer = get_user_model().objects.get(username="initech-viewer")
    assert names(api_client_for(outsider_viewer), "/api/v1/insights/") == []


def test_an_admin_of_two_pools_shares_an_insight_only_with_the_customers_of_its_pool(
    farm_admin_client, pool_owner, pool, customer
):
    second = ResourcePool.objects.create(owner=pool_owner, name="second")
    elsewhere = CustomerFactory(slug="elsewhere", resource_pool=second)

    inside = farm_admin_client.post(
        "/api/v1/insights/",
        {"resource_pool": "farm", "name": "ok", "allowed_customers": [str(customer.pk)]},
        format="json",
    )
    outside = farm_admin_client.post(
        "/api/v1/insights/",
        {"resource_pool": "farm", "name": "no", "allowed_customers": [str(elsewhere.pk)]},
        format="json",
    )

    assert inside.status_code == 201
    assert (outside.status_code, list(outside.json())) == (400, ["allowed_customers"])
    assert not Insight.objects.filter(name="no").exists()


def test_staff_share_an_insight_with_any_customer(api_client_for, staff_user, outsider, pool):
    response = api_client_for(staff_user).post(
        "/api/v1/insights/",
        {"resource_pool": "farm", "name": "x", "allowed_customers": [str(outsider.pk)]},
        format="json",
    )

    assert response.status_code == 201
    assert list(Insight.objects.get(name="x").allowed_customers.all()) == [outsider]


def test_the_admin_site_is_for_staff_only(client, customer, acme_admin, staff_user):
    acme_admin.user.set_password("pw-12345678")
    acme_admin.user.save()
    client.force_login(acme_admin.user)

    refused = client.post(
        "/admin/resourcepools/resourcepool/add/", {"name": "sneaky", "owner": str(customer.pk)}
    )

    assert refused.status_code == 302
    assert "/admin/login/" in refused["Location"]
    assert not ResourcePool.objects.filter(name="sneaky").exists()
    operator = UserFactory(username="pool-operator", is_staff=True)
    operator.user_permissions.add(Permission.objects.get(codename="add_resourcepool"))
    client.force_login(operator)
    assert client.get("/admin/resourcepools/resourcepool/add/").status_code == 200


# --- members -------------------------------------------------------------------------------


@pytest.fixture
def globex_user(other_customer):
    user = UserFactory(username="globex-alice", email="alice@globex.example")
    MembershipFactory(user=user, customer=other_customer, role=Role.SUBMITTER)
    return user


def test_a_customer_admin_cannot_attach_another_customers_user(
    acme_admin_client, customer, globex_user
):
    response = acme_admin_client.post(
        members_url(customer), {"username": "globex-alice", "role": "submitter"}, format="json"
    )

    assert (response.status_code, response.json()) == (400, REFUSED_USERNAME)
    assert "alice@globex.example" not in response.content.decode()
    assert list(Membership.objects.filter(user=globex_user).values_list("customer__slug")) == [
        ("globex",)
    ]


def test_a_refused_attach_answers_exactly_like_every_other_unusable_username(
    acme_admin_client, customer, globex_user
):
    UserFactory(username="lonely", email="lonely@nowhere.example")  # a user of no customer

    attach = acme_admin_client.post(
        members_url(customer), {"username": "globex-alice", "role": "viewer"}, format="json"
    )
    with_password = acme_admin_client.post(
        members_url(customer),
        {"username": "globex-alice", "role": "viewer", "password": "a-new-password"},
        format="json",
    )
    memberless = acme_admin_client.post(
        members_url(customer), {"username": "lonely", "role": "viewer"}, format="json"
    )

    answers = [(r.status_code, r.json()) for r in (attach, with_password, memberless)]
    assert answers == [(400, REFUSED_USERNAME)] * 3
    assert (
        Membership.objects.filter(
            customer=customer, user__username__in=["globex-alice", "lonely"]
        ).count()
        == 0
    )
    globex_user.refresh_from_db()
    assert globex_user.check_password("secret-password")


def test_a_customer_admin_attaches_a_user_of_another_customer_it_administers(
    acme_admin, acme_admin_client, customer, make_principal
):
    sister = CustomerFactory(slug="acme-labs")
    MembershipFactory(user=acme_admin.user, customer=sister, role=Role.ADMIN)
    colleague = UserFactory(username="acme-bob", email="bob@acme.example")
    MembershipFactory(user=colleague, customer=sister, role=Role.VIEWER)

    response = acme_admin_client.post(
        members_url(customer), {"username": "acme-bob", "role": "viewer"}, format="json"
    )

    assert response.status_code == 201
    assert (response.json()["username"], response.json()["email"]) == (
        "acme-bob",
        "bob@acme.example",
    )
    assert Membership.objects.filter(user=colleague, customer=customer).exists()


def test_staff_still_attach_any_existing_user(api_client_for, staff_user, customer, globex_user):
    response = api_client_for(staff_user).post(
        members_url(customer), {"username": "globex-alice", "role": "viewer"}, format="json"
    )

    assert response.status_code == 201
    assert response.json()["email"] == "alice@globex.example"
    assert Membership.objects.filter(user=globex_user, customer=customer).exists()


def test_members_list_and_detail_hide_the_email_of_a_user_who_also_belongs_elsewhere(
    acme_admin_client, api_client_for, staff_user, customer, globex_user
):
    shared = MembershipFactory(user=globex_user, customer=customer, role=Role.VIEWER)
    own = UserFactory(username="acme-carol", email="carol@acme.example")
    MembershipFactory(user=own, customer=customer, role=Role.VIEWER)

    listed = acme_admin_client.get(members_url(customer)).json()["results"]
    detail = acme_admin_client.get(f"{members_url(customer)}{shared.pk}/")
    changed = acme_admin_client.patch(
        f"{members_url(customer)}{shared.pk}/", {"role": "submitter"}, format="json"
    )
    by_staff = api_client_for(staff_user).get(f"{members_url(customer)}{shared.pk}/")

    emails = {row["username"]: row["email"] for row in listed}
    assert (emails["globex-alice"], emails["acme-carol"]) == (None, "carol@acme.example")
    assert detail.json()["email"] is None
    assert (changed.status_code, changed.json()["email"]) == (200, None)
    assert by_staff.json()["email"] == "alice@globex.example"


# --- templates: global sharing and where a run's events go ---------------------------------

TEMPLATE = {
    "name": "recommended",
    "agenda": {
        "operations": [{"name": "log", "type": "log"}],
        "callback_url": "https://author.example.com/collect",
    },
}


def test_a_customer_admin_cannot_make_a_template_global(acme_admin_client, globex_client):
    created = acme_admin_client.post(
        "/api/v1/agenda-templates/", {**TEMPLATE, "is_global": True}, format="json"
    )
    private = acme_admin_client.post("/api/v1/agenda-templates/", TEMPLATE, format="json")
    made_global = acme_admin_client.patch(
        f"/api/v1/agenda-templates/{private.json()['id']}/", {"is_global": True}, format="json"
    )

    assert (created.status_code, list(created.json())) == (400, ["is_global"])
    assert (made_global.status_code, list(made_global.json())) == (400, ["is_global"])
    assert AgendaTemplate.objects.get().is_global is False
    assert names(globex_client, "/api/v1/agenda-templates/") == []


def test_a_shared_templates_callback_url_never_receives_another_customers_events(
    staff_user, api_client_for, customer, other_customer, other_submitter, submitter, insight
):
    staff = api_client_for(staff_user)
    template = staff.post(
        "/api/v1/agenda-templates/",
        {**TEMPLATE, "customer": str(customer.pk), "is_global": True},
        format="json",
    ).json()
    url = f"/api/v1/agenda-templates/{template['id']}/run/"

    by_globex = api_client_for(other_submitter).post(url, {"payload": {}}, format="json")
    by_acme = api_client_for(submitter).post(url, {"payload": {}}, format="json")

    assert (by_globex.status_code, by_acme.status_code) == (201, 201)
    runs = {agenda.customer_id: agenda.callback_url for agenda in Agenda.objects.all()}
    assert runs == {other_customer.pk: "", customer.pk: "https://author.example.com/collect"}
