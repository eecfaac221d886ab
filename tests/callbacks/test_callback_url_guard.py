"""The callback address guard: IPv6 addresses that embed a private IPv4 one, and URLs with
user-info or backslashes, are refused at input (400 on the field) and at delivery."""

import ipaddress
import socket

import pytest

from agendas.services import agenda_pause
from core.outbound_urls import RefusedURL, callback_url_refusal, resolve_target
from resourcepools.models import Membership
from scheduling import callbacks
from scheduling.callbacks import DeliveryRun, callbacks_deliver
from scheduling.models import CallbackDelivery

Role = Membership.Role

# (an IPv6 address, the private IPv4 address it embeds)
EMBEDDED_PRIVATE = [
    ("2002:7f00:1::", "127.0.0.1"),  # 6to4
    ("2002:a00:1::1", "10.0.0.1"),  # 6to4
    ("2002:a9fe:a9fe::", "169.254.169.254"),  # 6to4, cloud metadata
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"),  # Teredo client
    ("2001:0:c0a8:101::", "192.168.1.1"),  # Teredo server
    ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 well-known prefix
    ("64:ff9b::a9fe:a9fe", "169.254.169.254"),  # NAT64 well-known prefix
    ("64:ff9b:1::a00:1", "10.0.0.1"),  # NAT64 local-use prefix
    ("::ffff:10.0.0.1", "10.0.0.1"),  # IPv4-mapped
]
TRICKS = [
    "http://127.0.0.1:1\\@example.com/",
    "https://example.com\\@127.0.0.1/hook",
    "http://user@example.com/hook",
    "https://user:secret@example.com/hook",
    "http://example.com@127.0.0.1/hook",
]


def _resolving_to(address: str):
    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]

    return resolve


# --- the rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "embedded"), EMBEDDED_PRIVATE)
def test_an_address_embedding_a_private_ipv4_is_refused_like_the_ipv4(address, embedded):
    with pytest.raises(RefusedURL, match=f"embeds {embedded}"):
        resolve_target(f"http://[{address}]/hook", allow_private=False)
    assert f"embeds {embedded}" in callback_url_refusal(
        f"http://[{address}]/hook", allow_private=False
    )


@pytest.mark.parametrize(("address", "embedded"), EMBEDDED_PRIVATE)
def test_a_name_resolving_to_an_embedded_private_address_is_refused_at_delivery(
    monkeypatch, address, embedded
):
    monkeypatch.setattr(socket, "getaddrinfo", _resolving_to(address))

    assert callback_url_refusal("https://hooks.example/cb", allow_private=False) is None
    with pytest.raises(RefusedURL, match=rf"hooks\.example resolves to .*embeds {embedded}"):
        resolve_target("https://hooks.example/cb", allow_private=False)


@pytest.mark.parametrize("address", ["2002:808:808::", "64:ff9b::808:808", "::ffff:8.8.8.8"])
def test_an_address_embedding_a_public_ipv4_is_called_like_the_ipv4(address):
    called = resolve_target(f"http://[{address}]/hook", allow_private=False)

    assert called == str(ipaddress.ip_address(address))
    assert callback_url_refusal(f"http://[{address}]/hook", allow_private=False) is None


@pytest.mark.parametrize("url", TRICKS)
def test_user_info_and_backslashes_are_refused_even_where_private_addresses_are_allowed(url):
    with pytest.raises(RefusedURL, match="user-info|backslash"):
        resolve_target(url, allow_private=True)
    assert "user-info" in callback_url_refusal(url) or "backslash" in callback_url_refusal(url)


def test_loopback_names_are_refused_at_input_unless_private_addresses_are_allowed():
    assert "localhost" in callback_url_refusal("http://localhost:8000/", allow_private=False)
    assert "a.localhost" in callback_url_refusal("http://a.localhost/", allow_private=False)
    assert callback_url_refusal("http://localhost:8000/", allow_private=True) is None


# --- at input ------------------------------------------------------------------------------


@pytest.fixture
def admin_api(admin_member, api_client_for):
    return api_client_for(admin_member)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url", [f"http://[{address}]/hook" for address, _ in EMBEDDED_PRIVATE] + TRICKS
)
def test_a_customer_callback_url_is_refused_at_input_with_400_on_the_field(
    settings, admin_api, customer, url
):
    settings.POP_CALLBACK_ALLOW_PRIVATE = False
    customer.callback_url = "https://hooks.example.com/pop"
    customer.save(update_fields=["callback_url"])

    response = admin_api.patch(
        f"/api/v1/customers/{customer.pk}/", {"callback_url": url}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["callback_url"])
    customer.refresh_from_db()
    assert customer.callback_url == "https://hooks.example.com/pop"


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://[2002:a00:1::1]/hook", TRICKS[0], TRICKS[2]])
def test_an_agenda_callback_url_is_refused_at_input_with_400_on_the_field(
    settings, submitter, insight, api_client_for, operations, url
):
    settings.POP_CALLBACK_ALLOW_PRIVATE = False

    response = api_client_for(submitter).post(
        "/api/v1/agendas/", {"operations": operations, "callback_url": url}, format="json"
    )

    assert (response.status_code, list(response.json())) == (400, ["callback_url"])
    assert not submitter.customer.agendas.exists()


@pytest.mark.django_db
def test_a_public_callback_url_is_still_accepted(settings, admin_api, customer):
    settings.POP_CALLBACK_ALLOW_PRIVATE = False

    response = admin_api.patch(
        f"/api/v1/customers/{customer.pk}/", {"callback_url": "https://8.8.8.8/pop"}, format="json"
    )

    assert response.status_code == 200
    customer.refresh_from_db()
    assert customer.callback_url == "https://8.8.8.8/pop"


# --- at delivery ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_stored_url_whose_name_now_resolves_to_a_6to4_loopback_fails_without_a_request(
    settings, monkeypatch, submitter, calls_back_to, submit_agenda
):
    settings.POP_CALLBACK_ALLOW_PRIVATE = False
    calls_back_to("https://hooks.example/cb")  # accepted at input: a public-looking name
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)
    monkeypatch.setattr(socket, "getaddrinfo", _resolving_to("2002:7f00:1::"))
    monkeypatch.setattr(callbacks, "new_client", lambda *args, **kwargs: _NoClient())

    assert callbacks_deliver() == DeliveryRun(failed=1)

    [row] = CallbackDelivery.objects.filter(agenda=agenda)
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 1, None)
    assert "2002:7f00:1:: embeds 127.0.0.1" in row.last_error


@pytest.mark.django_db
def test_a_stored_url_with_user_info_fails_without_a_request(
    submitter, calls_back_to, submit_agenda, http_receiver
):
    receiver = http_receiver()  # listening, and private addresses are allowed in these tests
    calls_back_to(receiver.url.replace("http://", "http://user:secret@"))
    agenda = submit_agenda(submitter)
    agenda_pause(principal=submitter.user, agenda=agenda)

    assert callbacks_deliver() == DeliveryRun(failed=1)

    assert receiver.requests == []
    [row] = CallbackDelivery.objects.filter(agenda=agenda)
    assert row.status == "failed"
    assert "user-info" in row.last_error


class _NoClient:
    """An httpx client stand-in that fails the test if a request is made."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def stream(self, *args, **kwargs):
        raise AssertionError("no request may be sent to a refused address")

    def close(self):
        pass
