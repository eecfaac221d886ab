"""Failed logins are limited per account and per address on every entry point (django-axes), and
the client address comes from X-Forwarded-For only behind trusted proxies (POP_NUM_PROXIES).

In-process: the limit itself. tests/security/test_login_throttle.py proves it holds across two
gunicorn workers.
"""

import pytest
from axes.models import AccessAttempt
from django.core.cache import caches
from django.db import connection
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from core.client_ip import client_ip
from core.throttling import AnonRateThrottle
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
TOKEN = "/api/v1/auth/token/"
PASSWORD = "secret-password"
LIMIT = 3


@pytest.fixture(autouse=True)
def _limits(settings):
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(db):
    return UserFactory(username="alice", password=PASSWORD)


@pytest.fixture
def staff(db):
    return UserFactory(username="root", password=PASSWORD, is_staff=True, is_superuser=True)


def _token(username: str, password: str, **headers: str):
    return APIClient().post(
        TOKEN, {"username": username, "password": password}, format="json", **headers
    )


def _form_login(path: str, username: str, password: str, **headers: str):
    browser = Client()
    response = browser.post(path, {"username": username, "password": password}, **headers)
    return response, browser


def test_the_token_endpoint_refuses_even_the_right_password_once_the_account_hit_the_limit(alice):
    failures = [_token("alice", "wrong").status_code for _ in range(LIMIT)]

    locked = _token("alice", PASSWORD)

    assert failures == [400] * (LIMIT - 1) + [429]  # the LIMIT-th failure locks
    assert locked.status_code == 429
    assert locked["Content-Type"] == "application/json"
    assert locked.json() == {
        "detail": "Too many failed logins for this account or address: try again in 15 minutes."
    }
    assert locked["Retry-After"] == "900"
    assert "token" not in locked.json()


def test_a_rotating_forwarded_for_does_not_reset_the_address_count_without_trusted_proxies(
    alice, settings
):
    settings.POP_NUM_PROXIES = 0
    usernames = [f"nobody-{n}" for n in range(LIMIT)]
    failures = [
        _token(name, "guess", HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
        for n, name in enumerate(usernames)
    ]

    # Another account, the right password, yet another spoofed address: the address is locked.
    locked = _token("alice", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.7")

    assert failures == [400] * (LIMIT - 1) + [429]  # the LIMIT-th failure locks
    assert locked.status_code == 429
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"127.0.0.1"}


def test_behind_a_trusted_proxy_each_forwarded_client_is_counted_on_its_own(alice, settings):
    settings.POP_NUM_PROXIES = 1
    for n in range(LIMIT):
        _token(f"nobody-{n}", "guess", HTTP_X_FORWARDED_FOR="203.0.113.9")

    elsewhere = _token("alice", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.7")
    same_client = _token("alice", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9")

    assert elsewhere.status_code == 200
    assert same_client.status_code == 429


def test_the_login_form_locks_the_account_with_a_page(alice):
    for _ in range(LIMIT - 1):
        response, _ = _form_login("/accounts/login/", "alice", "wrong")
        assert response.status_code == 200  # the form again, with its error

    last_failure, _ = _form_login("/accounts/login/", "alice", "wrong")
    locked, browser = _form_login("/accounts/login/", "alice", PASSWORD)

    assert last_failure.status_code == 429
    assert locked.status_code == 429
    assert locked["Content-Type"].startswith("text/html")
    assert b"Too many failed logins" in locked.content
    assert "_auth_user_id" not in browser.session


def test_the_admin_login_locks_the_account_with_a_page(staff):
    for _ in range(LIMIT - 1):
        response, _ = _form_login("/admin/login/", "root", "wrong")
        assert response.status_code == 200

    last_failure, _ = _form_login("/admin/login/", "root", "wrong")
    locked, browser = _form_login("/admin/login/", "root", PASSWORD)

    assert last_failure.status_code == 429
    assert locked.status_code == 429
    assert b"Too many failed logins" in locked.content
    assert "_auth_user_id" not in browser.session


def test_failures_on_one_entry_point_count_on_the_others(alice):
    for _ in range(LIMIT):
        _form_login("/accounts/login/", "alice", "wrong")

    assert _token("alice", PASSWORD).status_code == 429


def test_the_anonymous_api_throttle_ignores_a_spoofed_forwarded_for(alice, monkeypatch):
    monkeypatch.setattr(AnonRateThrottle, "THROTTLE_RATES", {"anon": "2/minute"})

    statuses = [
        _token("alice", PASSWORD, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}").status_code
        for n in range(3)
    ]

    assert statuses == [200, 200, 429]


def test_throttle_counters_live_in_the_shared_database_cache():
    caches["default"].set("pop-probe", 41)

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pop_cache WHERE cache_key LIKE %s", ["%:pop-probe"])
        (rows,) = cursor.fetchone()

    assert caches["default"].get("pop-probe") == 41
    assert rows == 1


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "203.0.113.5", "10.0.0.1"),
        (0, "", "10.0.0.1"),
        (1, "203.0.113.5", "203.0.113.5"),
        (1, "6.6.6.6, 203.0.113.5", "203.0.113.5"),
        (2, "6.6.6.6, 203.0.113.5, 10.0.0.2", "203.0.113.5"),
        (3, "203.0.113.5", "203.0.113.5"),
        (1, "", "10.0.0.1"),
    ],
)
def test_the_client_address_trusts_only_the_configured_proxies(
    settings, proxies, forwarded, expected
):
    settings.POP_NUM_PROXIES = proxies
    headers = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", **headers)

    assert client_ip(request) == expected
