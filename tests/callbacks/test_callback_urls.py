"""Which callback URLs POP calls, and how it connects to them (no database)."""

import socket

import pytest

from core import outbound_urls
from core.outbound_urls import RefusedURL, resolve_target
from scheduling.callbacks import encode_body, send_signed


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "https://172.16.0.9/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.100.100.200/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
    ],
)
def test_non_public_addresses_are_refused_unless_allowed(url):
    with pytest.raises(RefusedURL, match="non-public address"):
        resolve_target(url, allow_private=False)
    assert resolve_target(url, allow_private=True) is None


@pytest.mark.parametrize(
    "url", ["ftp://example.com/hook", "file:///etc/passwd", "gopher://x/", "http:///nohost"]
)
def test_only_http_and_https_urls_with_a_host_are_called_even_when_private_is_allowed(url):
    with pytest.raises(RefusedURL, match="refused"):
        resolve_target(url, allow_private=True)


def test_a_public_address_is_called_at_the_address_that_was_checked():
    assert resolve_target("https://93.184.216.34:8443/hook", allow_private=False) == (
        "93.184.216.34"
    )


def test_a_host_with_any_non_public_address_is_refused(monkeypatch):
    def resolve(host, port, *args, **kwargs):
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    with pytest.raises(RefusedURL, match=r"hooks\.example resolves to a non-public address"):
        resolve_target("https://hooks.example/cb", allow_private=False)


def test_the_request_goes_to_the_checked_address_with_the_original_host_and_one_lookup(
    settings, monkeypatch, http_receiver
):
    # DNS is the boundary: the first answer is the receiver; a second lookup (a rebinding
    # attempt) would fail the request. The address policy is opened for the loopback test.
    settings.POP_CALLBACK_ALLOW_PRIVATE = False
    receiver = http_receiver()
    lookups = []

    def resolve(host, port, *args, **kwargs):
        if host != "127.0.0.1":  # a literal address needs no lookup
            lookups.append(host)
        if len(lookups) > 1:
            raise socket.gaierror("second lookup")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    monkeypatch.setattr(outbound_urls, "_is_forbidden", lambda address: False)
    body = encode_body({"event": "executing", "n": 1})

    result = send_signed(
        url=f"http://hooks.example:{receiver.port}/cb?x=1",
        body=body,
        secret="k",
        event="executing",
    )

    assert result.is_success
    assert lookups == ["hooks.example"]
    [request] = receiver.requests
    assert request.headers["host"] == f"hooks.example:{receiver.port}"
    assert request.path == "/cb?x=1"
    assert request.body == body
    assert request.signature_verifies("k")


def test_a_redirect_is_not_followed_and_counts_as_a_failure(http_receiver):
    receiver = http_receiver(respond=lambda request: 307)

    result = send_signed(url=receiver.url, body=b"{}", secret="k", event="paused")

    assert (result.status_code, result.is_success) == (307, False)
    assert len(receiver.requests) == 1


def test_an_unresolvable_host_is_a_retryable_error_not_a_refusal(settings):
    settings.POP_CALLBACK_ALLOW_PRIVATE = False

    result = send_signed(url="http://no-such-host.invalid/cb", body=b"{}", secret="k", event="x")

    assert (result.refused, result.status_code) == (False, None)
    assert result.error.startswith("cannot resolve no-such-host.invalid")
