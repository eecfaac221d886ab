"""customers/ and customers/{id}/members/ with tokens (docs/design.md §10, §10.3)."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.services import token_issue
from core.principals import SYSTEM
from resourcepools.models import Customer, Membership
from tests.factories import CustomerFactory, MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


def members_url(customer, member=None, suffix=""):
    base = f"/api/v1/customers/{customer.pk}/members/"
    return f"{base}{member.pk}/{suffix}" if member is not None else base


# --- customers -----------------------------------------------------------------------------


def test_members_list_only_their_own_customers(client, other_customer, submitter):
    response = client.get("/api/v1/customers/")

    assert response.status_code == 200
    assert [row["slug"] for row in response.json()["results"]] == ["acme"]
    assert response.json()["results"][0]["has_callback_secret"] is False
    assert "callback_secret" not in response.json()["results"][0]


def test_staff_list_every_customer(staff_client, customer, other_customer):
    slugs = [row["slug"] for row in staff_client.get("/api/v1/customers/").json()["results"]]

    assert slugs == ["acme", "farmco", "globex"]


def test_another_customer_is_404(client, other_customer):
    assert client.get(f"/api/v1/customers/{other_customer.pk}/").status_code == 404


def test_staff_create_a_customer_stamped_with_the_request_cid(staff_client, pool):
    response = staff_client.post(
        "/api/v1/customers/",
        {"name": "Initech", "slug": "initech", "resource_pool": "farm", "weight": 3},
        format="json",
        HTTP_X_POP_CID="new-customer",
    )

    assert response.status_code == 201
    created = Customer.objects.get(slug="initech")
    assert (created.resource_pool, created.weight, created.cid) == (pool, 3, "new-customer")


def test_a_customer_admin_may_not_create_customers(admin_client):
    response = admin_client.post(
        "/api/v1/customers/", {"name": "Initech", "slug": "initech"}, format="json"
    )

    assert response.status_code == 403
    assert not Customer.objects.filter(slug="initech").exists()


def test_creating_a_customer_with_a_taken_slug_or_bad_weight_is_400(staff_client, customer):
    taken = staff_client.post("/api/v1/customers/", {"name": "A", "slug": "acme"}, format="json")
    bad = staff_client.post(
        "/api/v1/customers/", {"name": "B", "slug": "b", "weight": 0}, format="json"
    )

    assert (taken.status_code, list(taken.json())) == (400, ["slug"])
    assert (bad.status_code, list(bad.json())) == (400, ["weight"])
    assert Customer.objects.filter(name__in=["A", "B"]).count() == 0


def test_a_customer_admin_sets_its_callback_but_not_its_weight(admin_client, customer):
    url = f"/api/v1/customers/{customer.pk}/"

    callback = admin_client.patch(
        url, {"callback_url": "https://hooks.example.com/pop", "callback_secret": "s3"}
    )
    weight = admin_client.patch(url, {"weight": 50}, format="json")

    assert callback.status_code == 200
    assert callback.json()["has_callback_secret"] is True
    assert weight.status_code == 403
    customer.refresh_from_db()
    assert (customer.callback_url, customer.callback_secret, customer.weight) == (
        "https://hooks.example.com/pop",
        "s3",
        1,
    )


def test_a_submitter_may_not_change_its_customer(client, customer):
    response = client.patch(f"/api/v1/customers/{customer.pk}/", {"callback_url": "https://x.io"})

    assert response.status_code == 403
    customer.refresh_from_db()
    assert customer.callback_url == ""


def test_changing_another_customer_is_404_and_changes_nothing(admin_client, other_customer):
    response = admin_client.patch(
        f"/api/v1/customers/{other_customer.pk}/", {"callback_url": "https://x.io"}, format="json"
    )

    assert response.status_code == 404
    other_customer.refresh_from_db()
    assert other_customer.callback_url == ""


def test_staff_delete_a_customer_but_not_one_that_owns_a_pool(staff_client, customer, pool_owner):
    deleted = staff_client.delete(f"/api/v1/customers/{customer.pk}/")
    refused = staff_client.delete(f"/api/v1/customers/{pool_owner.pk}/")

    assert deleted.status_code == 204
    assert refused.status_code == 409
    assert "resource pool" in refused.json()["detail"]
    assert list(Customer.objects.values_list("slug", flat=True)) == ["farmco"]


def test_a_customer_admin_may_not_delete_its_customer(admin_client, customer):
    assert admin_client.delete(f"/api/v1/customers/{customer.pk}/").status_code == 403
    assert Customer.objects.filter(pk=customer.pk).exists()


# --- members -------------------------------------------------------------------------------


def test_an_admin_lists_its_members(admin_client, customer, admin_member, submitter):
    response = admin_client.get(members_url(customer), {"role": "submitter"})

    assert response.status_code == 200
    assert [row["username"] for row in response.json()["results"]] == [submitter.user.username]


def test_a_submitter_may_not_list_members(client, customer):
    assert client.get(members_url(customer)).status_code == 403


def test_another_customers_members_are_404(admin_client, other_customer):
    assert admin_client.get(members_url(other_customer)).status_code == 404
    assert admin_client.get("/api/v1/customers/not-a-uuid/members/").status_code == 404


def test_an_admin_adds_a_new_user_as_a_member(admin_client, customer):
    response = admin_client.post(
        members_url(customer),
        {"username": "newbie", "role": "viewer", "email": "n@example.com"},
        format="json",
    )

    assert response.status_code == 201
    assert (response.json()["username"], response.json()["role"]) == ("newbie", "viewer")
    user = get_user_model().objects.get(username="newbie")
    assert user.has_usable_password() is False
    assert Membership.objects.get(user=user).customer == customer


def test_adding_an_existing_member_again_or_a_bad_role_is_400(admin_client, customer, viewer):
    again = admin_client.post(
        members_url(customer), {"username": viewer.user.username, "role": "admin"}, format="json"
    )
    bad_role = admin_client.post(
        members_url(customer), {"username": "x", "role": "owner"}, format="json"
    )

    assert (again.status_code, list(again.json())) == (400, ["username"])
    assert (bad_role.status_code, list(bad_role.json())) == (400, ["role"])
    assert Membership.objects.get(user=viewer.user).role == "viewer"
    assert not get_user_model().objects.filter(username="x").exists()


def test_adding_a_member_to_another_customer_is_404(admin_client, other_customer):
    response = admin_client.post(
        members_url(other_customer), {"username": "spy", "role": "admin"}, format="json"
    )

    assert response.status_code == 404
    assert not get_user_model().objects.filter(username="spy").exists()


def test_an_admin_changes_a_role_and_removes_a_member(admin_client, customer, viewer):
    member = Membership.objects.get(user=viewer.user)

    changed = admin_client.patch(members_url(customer, member), {"role": "submitter"})
    removed = admin_client.delete(members_url(customer, member))

    assert (changed.status_code, changed.json()["role"]) == (200, "submitter")
    assert removed.status_code == 204
    assert not Membership.objects.filter(pk=member.pk).exists()


def test_the_last_admin_can_be_neither_demoted_nor_removed(admin_client, customer, admin_member):
    member = Membership.objects.get(user=admin_member.user)

    demoted = admin_client.patch(members_url(customer, member), {"role": "viewer"})
    removed = admin_client.delete(members_url(customer, member))

    assert (demoted.status_code, list(demoted.json())) == (400, ["role"])
    assert removed.status_code == 400
    assert Membership.objects.get(pk=member.pk).role == "admin"


# --- tokens --------------------------------------------------------------------------------


def test_an_admin_issues_a_token_that_works_and_revokes_it(
    admin_client, api_client_for, customer, submitter
):
    member = Membership.objects.get(user=submitter.user)
    old = token_issue(principal=SYSTEM, user=submitter.user, name="api")
    kept = token_issue(principal=SYSTEM, user=submitter.user, name="laptop")

    issued = admin_client.post(members_url(customer, member, "token/"))

    assert issued.status_code == 201
    key = issued.json()["token"]
    assert key != old.key
    assert issued.json()["name"] == "api"
    assert sorted(ApiToken.objects.filter(user=submitter.user).values_list("name", flat=True)) == [
        "api",
        "laptop",
    ]
    assert not ApiToken.objects.filter(pk=old.token.pk).exists()  # replaced: same name
    assert ApiToken.objects.filter(pk=kept.token.pk).exists()
    caller = APIClient()
    caller.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert caller.get("/api/v1/agendas/").status_code == 200
    revoked = admin_client.delete(members_url(customer, member, "token/"))
    assert (revoked.status_code, revoked.json()) == (200, {"revoked": 2})
    assert not ApiToken.objects.filter(user=submitter.user).exists()
    assert caller.get("/api/v1/agendas/").status_code == 401


def test_no_token_for_a_member_who_also_belongs_to_a_customer_you_do_not_administer(
    admin_client, customer, other_customer, submitter
):
    MembershipFactory(user=submitter.user, customer=other_customer, role=Role.VIEWER)
    member = Membership.objects.get(user=submitter.user, customer=customer)

    response = admin_client.post(members_url(customer, member, "token/"))

    assert response.status_code == 403
    assert not ApiToken.objects.filter(user=submitter.user).exists()


def test_no_token_for_a_staff_member(admin_client, customer):
    operator = UserFactory(username="op2", is_staff=True)
    member = MembershipFactory(user=operator, customer=customer, role=Role.VIEWER)

    response = admin_client.post(members_url(customer, member, "token/"))

    assert response.status_code == 403
    assert not ApiToken.objects.filter(user=operator).exists()


def test_a_submitter_may_not_issue_tokens(client, customer, viewer):
    member = Membership.objects.get(user=viewer.user)

    assert client.post(members_url(customer, member, "token/")).status_code == 403
    assert not ApiToken.objects.filter(user=viewer.user).exists()


def test_issuing_a_token_in_another_customer_is_404(
    admin_client, customer, other_submitter, other_customer
):
    member = Membership.objects.get(user=other_submitter.user)
    outsider = CustomerFactory(slug="outsider")

    foreign = admin_client.post(members_url(other_customer, member, "token/"))
    through_own = admin_client.post(members_url(customer, member, "token/"))
    unrelated = admin_client.post(f"/api/v1/customers/{outsider.pk}/members/{member.pk}/token/")

    assert [foreign.status_code, through_own.status_code, unrelated.status_code] == [404] * 3
    assert not ApiToken.objects.filter(user=other_submitter.user).exists()
