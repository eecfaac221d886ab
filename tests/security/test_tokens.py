"""API tokens: hashed at rest, named, expiring, revocable one by one, last use stamped cheaply.

Every caller here authenticates with a real key through the real authentication class.
"""

import hashlib
import importlib
import io
import json
from datetime import timedelta

import httpx
import pytest
from django.apps import apps as django_apps
from django.contrib.auth.hashers import make_password
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from accounts.authentication import ApiTokenAuthentication
from accounts.models import ApiToken
from accounts.services import LAST_USED_RESOLUTION, token_issue
from core.principals import SYSTEM
from core.throttling import throttle_counters_clear
from popclient.cli import main as pop_main
from popclient.client import PopClient
from resourcepools.models import Membership

pytestmark = pytest.mark.django_db
TOKENS = "/api/v1/tokens/"
AGENDAS = "/api/v1/agendas/"


@pytest.fixture(autouse=True)
def fresh_throttles():
    cache.clear()
    throttle_counters_clear()
    yield
    cache.clear()
    throttle_counters_clear()


def caller(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def tokens_of(user) -> list[tuple]:
    return sorted(
        ApiToken.objects.filter(user=user).values_list("pk", "name", "expiry", "last_used_at")
    )


def members_url(customer, member, suffix=""):
    return f"/api/v1/customers/{customer.pk}/members/{member.pk}/{suffix}"


# --- storage -------------------------------------------------------------------------------


def test_the_database_holds_the_hash_of_a_key_never_the_key(submitter):
    submitter.user.password = make_password("s3cret-pass")
    submitter.user.save()

    login = APIClient().post(
        "/api/v1/auth/token/",
        {"username": submitter.user.username, "password": "s3cret-pass"},
        format="json",
    )
    created = caller(login.json()["token"]).post(TOKENS, {"name": "laptop"}, format="json")

    assert (login.status_code, created.status_code) == (200, 201)
    for key, name in ((login.json()["token"], "login"), (created.json()["token"], "laptop")):
        row = ApiToken.objects.get(user=submitter.user, name=name)
        assert row.digest == hashlib.sha512(key.encode()).hexdigest()
        stored = [str(v) for v in ApiToken.objects.filter(pk=row.pk).values().get().values()]
        assert key not in stored
        assert not Token.objects.filter(key=key).exists()
    assert Token.objects.count() == 0


def test_the_login_answer_keeps_its_shape_and_names_the_token(submitter):
    submitter.user.password = make_password("s3cret-pass")
    submitter.user.save()

    response = APIClient().post(
        "/api/v1/auth/token/",
        {"username": submitter.user.username, "password": "s3cret-pass", "name": "ci"},
        format="json",
    )

    body = response.json()
    assert response.status_code == 200
    assert (body["username"], body["name"]) == (submitter.user.username, "ci")
    assert caller(body["token"]).get(AGENDAS).status_code == 200


# --- expiry and revocation -----------------------------------------------------------------


def test_an_expired_token_is_401_and_changes_nothing(submitter, insight):
    issued = token_issue(principal=SYSTEM, user=submitter.user, name="old", lifetime=timedelta(1))
    ApiToken.objects.filter(pk=issued.token.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    before = tokens_of(submitter.user)

    response = caller(issued.key).get(AGENDAS)

    assert response.status_code == 401
    assert response.json() == {"detail": "Token expired."}
    assert tokens_of(submitter.user) == before  # not stamped as used


def test_a_new_token_expires_after_the_default_lifetime_unless_told_otherwise(submitter, settings):
    settings.POP_TOKEN_TTL_DAYS = 30
    client = caller(token_issue(principal=SYSTEM, user=submitter.user, name="cli").key)

    default = client.post(TOKENS, {"name": "a"}, format="json").json()
    week = client.post(TOKENS, {"name": "b", "expires_in_days": 7}, format="json").json()
    never = client.post(TOKENS, {"name": "c", "expires_in_days": None}, format="json").json()
    refused = client.post(TOKENS, {"name": "d", "expires_in_days": 0}, format="json")

    expiries = {name: ApiToken.objects.get(name=name).expiry for name in ("a", "b", "c")}
    now = timezone.now()
    assert timedelta(days=29) < expiries["a"] - now <= timedelta(days=30)
    assert timedelta(days=6) < expiries["b"] - now <= timedelta(days=7)
    assert (expiries["c"], never["expiry"]) == (None, None)
    assert default["expiry"] and week["expiry"]
    assert (refused.status_code, list(refused.json())) == (400, ["expires_in_days"])
    assert not ApiToken.objects.filter(name="d").exists()


def test_a_revoked_token_is_401_while_a_second_token_of_the_same_user_still_works(submitter):
    laptop = token_issue(principal=SYSTEM, user=submitter.user, name="laptop")
    worker = token_issue(principal=SYSTEM, user=submitter.user, name="worker")

    revoked = caller(worker.key).delete(f"{TOKENS}{laptop.token.pk}/")

    assert revoked.status_code == 204
    assert caller(laptop.key).get(AGENDAS).status_code == 401
    assert caller(worker.key).get(AGENDAS).status_code == 200
    assert [name for _, name, _, _ in tokens_of(submitter.user)] == ["worker"]


def test_the_list_shows_names_and_times_but_never_a_key_or_hash(submitter):
    client = caller(token_issue(principal=SYSTEM, user=submitter.user, name="cli").key)
    created = client.post(TOKENS, {"name": "deploy"}, format="json")
    key = created.json()["token"]

    listed = client.get(TOKENS)
    shown = client.get(f"{TOKENS}{created.json()['id']}/")

    assert listed.status_code == shown.status_code == 200
    rows = listed.json()["results"]
    assert sorted(row["name"] for row in rows) == ["cli", "deploy"]
    assert set(rows[0]) == {"id", "name", "user", "username", "created", "expiry", "last_used_at"}
    digests = list(ApiToken.objects.values_list("digest", flat=True))
    for text in (listed.content.decode(), shown.content.decode()):
        assert key not in text and key[:15] not in text
        assert not any(digest in text for digest in digests)


def test_a_user_cannot_see_or_revoke_another_users_token(submitter, other_submitter):
    mine = token_issue(principal=SYSTEM, user=submitter.user, name="mine")
    theirs = token_issue(principal=SYSTEM, user=other_submitter.user, name="theirs")
    before = sorted(ApiToken.objects.values_list("pk", "name"))

    client = caller(mine.key)
    listed = client.get(TOKENS).json()["results"]
    shown = client.get(f"{TOKENS}{theirs.token.pk}/")
    revoked = client.delete(f"{TOKENS}{theirs.token.pk}/")

    assert [row["name"] for row in listed] == ["mine"]
    assert (shown.status_code, revoked.status_code) == (404, 404)
    assert sorted(ApiToken.objects.values_list("pk", "name")) == before
    assert caller(theirs.key).get(AGENDAS).status_code == 200


def test_staff_list_and_revoke_anyones_token(staff_user, submitter):
    staff = caller(token_issue(principal=SYSTEM, user=staff_user, name="ops").key)
    theirs = token_issue(principal=SYSTEM, user=submitter.user, name="theirs")

    listed = staff.get(TOKENS, {"user": submitter.user.pk}).json()["results"]
    revoked = staff.delete(f"{TOKENS}{theirs.token.pk}/")

    assert [row["name"] for row in listed] == ["theirs"]
    assert revoked.status_code == 204
    assert caller(theirs.key).get(AGENDAS).status_code == 401


# --- a customer admin and its members' tokens ----------------------------------------------


def test_a_customer_admin_lists_and_revokes_one_token_of_its_worker_member(
    admin_member, customer, make_principal
):
    deploy_worker = make_principal(customer, Membership.Role.WORKER, username="acme-puller")
    member = Membership.objects.get(user=deploy_worker.user)
    admin = caller(token_issue(principal=SYSTEM, user=admin_member.user, name="cli").key)
    first = admin.post(members_url(customer, member, "token/"), {"name": "deploy-a"}).json()
    second = admin.post(members_url(customer, member, "token/"), {"name": "deploy-b"}).json()

    listed = admin.get(members_url(customer, member, "tokens/"))
    revoked = admin.delete(members_url(customer, member, f"tokens/{first['id']}/"))

    assert listed.status_code == 200
    assert sorted(row["name"] for row in listed.json()) == ["deploy-a", "deploy-b"]
    assert first["token"] not in listed.content.decode()
    assert revoked.status_code == 204
    assert caller(first["token"]).get("/api/v1/queues/").status_code == 401
    assert [name for _, name, _, _ in tokens_of(deploy_worker.user)] == ["deploy-b"]
    assert second["token"]


def test_a_customer_admin_cannot_see_or_revoke_another_customers_tokens(
    admin_member, customer, other_customer, other_submitter
):
    theirs = token_issue(principal=SYSTEM, user=other_submitter.user, name="theirs")
    foreign_member = Membership.objects.get(user=other_submitter.user)
    admin = caller(token_issue(principal=SYSTEM, user=admin_member.user, name="cli").key)
    before = sorted(ApiToken.objects.values_list("pk", "name", "expiry"))

    answers = [
        admin.get(members_url(other_customer, foreign_member, "tokens/")),
        admin.get(members_url(customer, foreign_member, "tokens/")),
        admin.delete(members_url(other_customer, foreign_member, f"tokens/{theirs.token.pk}/")),
        admin.delete(members_url(customer, foreign_member, f"tokens/{theirs.token.pk}/")),
        admin.delete(members_url(other_customer, foreign_member, "token/")),
        admin.get(f"{TOKENS}{theirs.token.pk}/"),
        admin.delete(f"{TOKENS}{theirs.token.pk}/"),
    ]

    assert [answer.status_code for answer in answers] == [404] * len(answers)
    assert sorted(ApiToken.objects.values_list("pk", "name", "expiry")) == before
    assert caller(theirs.key).get(AGENDAS).status_code == 200


def test_a_token_of_another_member_is_404_through_this_members_route(
    admin_member, customer, submitter, viewer
):
    viewers = token_issue(principal=SYSTEM, user=viewer.user, name="viewer")
    submitter_member = Membership.objects.get(user=submitter.user)
    admin = caller(token_issue(principal=SYSTEM, user=admin_member.user, name="cli").key)

    response = admin.delete(members_url(customer, submitter_member, f"tokens/{viewers.token.pk}/"))

    assert response.status_code == 404
    assert ApiToken.objects.filter(pk=viewers.token.pk).exists()


# --- last use ------------------------------------------------------------------------------


def test_last_used_at_is_stamped_once_and_not_rewritten_on_every_request(submitter, insight):
    issued = token_issue(principal=SYSTEM, user=submitter.user, name="puller")
    client = caller(issued.key)

    client.get(AGENDAS)
    first = ApiToken.objects.get(pk=issued.token.pk).last_used_at
    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            assert client.get(AGENDAS).status_code == 200
    again = ApiToken.objects.get(pk=issued.token.pk).last_used_at

    assert first is not None and timezone.now() - first < timedelta(seconds=10)
    assert again == first
    assert not [q["sql"] for q in queries.captured_queries if "accounts_apitoken" in q["sql"]
                and q["sql"].lstrip().upper().startswith("UPDATE")]  # fmt: skip


def test_last_used_at_is_rewritten_once_it_is_a_minute_old(submitter, insight):
    issued = token_issue(principal=SYSTEM, user=submitter.user, name="puller")
    stale = timezone.now() - LAST_USED_RESOLUTION - timedelta(seconds=1)
    ApiToken.objects.filter(pk=issued.token.pk).update(last_used_at=stale)

    caller(issued.key).get(AGENDAS)

    assert ApiToken.objects.get(pk=issued.token.pk).last_used_at > stale


def test_a_successful_authentication_names_the_token_on_the_django_request(submitter):
    issued = token_issue(principal=SYSTEM, user=submitter.user, name="worker-farm-a")
    django_request = APIRequestFactory().get(AGENDAS, HTTP_AUTHORIZATION=f"Token {issued.key}")
    user, token = ApiTokenAuthentication().authenticate(Request(django_request))

    assert (user, token) == (submitter.user, issued.token)
    assert django_request.pop_token_name == "worker-farm-a"
    assert django_request.pop_token_id == str(issued.token.pk)


@pytest.mark.parametrize(
    "header", ["Token ", "Token a b", "Token \x7f" + "0" * 40, "Token " + "0" * 64]
)
def test_a_malformed_or_unknown_key_is_401(header, submitter):
    response = APIClient().get(AGENDAS, HTTP_AUTHORIZATION=header)

    assert response.status_code == 401


# --- legacy DRF keys -----------------------------------------------------------------------


def test_a_legacy_drf_key_still_authenticates_after_the_migration_moves_it(submitter, insight):
    legacy = Token.objects.create(user=submitter.user)
    migration = importlib.import_module("accounts.migrations.0002_move_drf_tokens")

    migration.move_drf_tokens(django_apps, None)

    assert Token.objects.count() == 0
    moved = ApiToken.objects.get(user=submitter.user)
    assert (moved.name, moved.expiry, moved.created) == ("legacy", None, legacy.created)
    assert moved.digest == hashlib.sha512(legacy.key.encode()).hexdigest()
    assert caller(legacy.key).get(AGENDAS).status_code == 200


def test_a_plain_drf_token_no_longer_authenticates(submitter, insight):
    legacy = Token.objects.create(user=submitter.user)

    assert caller(legacy.key).get(AGENDAS).status_code == 401


# --- the pop CLI against the in-process server ---------------------------------------------


@pytest.fixture
def wsgi_factory():
    """PopClients that talk to the real WSGI application inside the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    app = get_wsgi_application()

    def factory(url, token, **kwargs):
        kwargs.pop("transport", None)
        return PopClient(url, token, transport=httpx.WSGITransport(app=app), **kwargs)

    try:
        yield factory
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def run_pop(factory, *argv, env):
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POP_CONFIG", "/nonexistent/pop.json")
        patch.delenv("POP_TOKEN_FILE", raising=False)
        patch.delenv("POP_TOKEN", raising=False)
        for name, value in env.items():
            patch.setenv(name, value)
        code = pop_main(
            ["--url", "http://testserver", *argv], client_factory=factory, stdout=stdout,
            stderr=stderr,
        )  # fmt: skip
    return code, stdout.getvalue(), stderr.getvalue()


def test_pop_tokens_create_list_and_revoke_against_the_server(wsgi_factory, submitter, tmp_path):
    key = token_issue(principal=SYSTEM, user=submitter.user, name="cli").key
    env = {"POP_TOKEN": key}

    code, out, _ = run_pop(wsgi_factory, "tokens", "create", "deploy", "--json", env=env)
    created = json.loads(out)
    listed_code, listed, _ = run_pop(wsgi_factory, "tokens", "list", "--json", env=env)
    table_code, table, _ = run_pop(wsgi_factory, "tokens", "list", env=env)
    revoke_code, _, _ = run_pop(wsgi_factory, "tokens", "revoke", created["id"], env=env)
    refused, _, _ = run_pop(wsgi_factory, "tokens", "list", env={"POP_TOKEN": created["token"]})

    assert (code, listed_code, table_code, revoke_code) == (0, 0, 0, 0)
    assert created["name"] == "deploy" and created["token"]
    assert sorted(row["name"] for row in json.loads(listed)) == ["cli", "deploy"]
    assert created["token"] not in listed and created["token"] not in table
    assert "deploy" in table and "cli" in table
    assert refused == 6  # the revoked key is 401
    assert [name for _, name, _, _ in tokens_of(submitter.user)] == ["cli"]


def test_pop_tokens_create_can_write_the_key_to_a_private_file(wsgi_factory, submitter, tmp_path):
    token_file = tmp_path / "worker.token"
    env = {"POP_TOKEN": token_issue(principal=SYSTEM, user=submitter.user, name="cli").key}

    code, out, _ = run_pop(
        wsgi_factory, "tokens", "create", "worker", "--no-expiry", "--output", str(token_file),
        env=env,
    )  # fmt: skip
    listed_code, _, _ = run_pop(wsgi_factory, "--token-file", str(token_file), "tokens", "list",
                                env={})  # fmt: skip

    key = token_file.read_text().strip()
    assert (code, listed_code) == (0, 0)
    assert key not in out
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert ApiToken.objects.get(name="worker").expiry is None
    assert caller(key).get(AGENDAS).status_code == 200


# --- the admin -----------------------------------------------------------------------------


def test_staff_add_a_token_in_the_admin_and_see_its_key_once(staff_user, submitter, client):
    client.force_login(staff_user)

    response = client.post(
        "/admin/accounts/apitoken/add/",
        {"user": submitter.user.pk, "name": "deploy", "never_expires": "on"},
        follow=True,
    )

    token = ApiToken.objects.get(user=submitter.user, name="deploy")
    shown = [str(m) for m in response.context["messages"]]
    key = next(m.split(": ")[-1] for m in shown if "shown once" in m)
    assert response.status_code == 200
    assert token.expiry is None
    assert token.digest == hashlib.sha512(key.encode()).hexdigest()
    assert key not in client.get(f"/admin/accounts/apitoken/{token.pk}/change/").content.decode()
    assert caller(key).get("/api/v1/queues/").status_code == 200


def test_a_bearer_header_is_told_the_scheme_is_token(submitter):
    issued = token_issue(principal=SYSTEM, user=submitter.user, name="cli")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.key}")

    response = client.get(AGENDAS)

    assert response.status_code == 401
    assert response.json() == {
        "detail": "The authorization scheme is Token, not Bearer: send `Authorization: Token "
        "<key>`."
    }
    assert caller(issued.key).get(AGENDAS).status_code == 200
