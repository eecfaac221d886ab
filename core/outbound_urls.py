"""Which URLs POP calls on a customer's behalf (callbacks, alert webhooks): the address guard.

Only http(s), without user-info (`user@`) or backslashes; the host must not resolve to
loopback, private, link-local (cloud metadata), multicast or reserved addresses unless
POP_CALLBACK_ALLOW_PRIVATE. An IPv6 address that embeds an IPv4 one (IPv4-mapped, NAT64,
6to4, Teredo) is refused when the IPv4 address would be. `callback_url_refusal` applies the
rules at input to the URL as written (no DNS); `resolve_target` at delivery, returning the
checked address to connect to (no second lookup to rebind).
"""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings

# Cloud metadata endpoints that are not already link-local (169.254.169.254 is).
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")}
)


class RefusedURL(Exception):
    """A callback URL POP will not call: wrong scheme, or a forbidden address."""


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# NAT64: the well-known prefix (RFC 6052) and the local-use one (RFC 8215); the IPv4 address
# is the last 32 bits (the /96 form; a local-use prefix is refused as non-global anyway).
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
LOOPBACK_NAMES = ("localhost", ".localhost")


def _translated_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 host an IPv6 address stands for (IPv4-mapped, NAT64 well-known prefix), if any:
    such an address is judged exactly as that IPv4 address."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64_PREFIXES[0]:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _embedded_ipv4(address: Address) -> list[ipaddress.IPv4Address]:
    """Every IPv4 address an IPv6 address carries: IPv4-mapped, NAT64 (either prefix), 6to4,
    and both the server and the client of a Teredo address."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    embedded = [address.ipv4_mapped, address.sixtofour, *(address.teredo or ())]
    if any(address in prefix for prefix in NAT64_PREFIXES):
        embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return [ipv4 for ipv4 in embedded if ipv4 is not None]


def _forbidden_reason(address: Address) -> str | None:
    """Why POP does not call `address` ("10.0.0.1", "2002:a00:1:: embeds 10.0.0.1"), or None."""
    translated = _translated_ipv4(address)
    if translated is not None:
        return f"{address} embeds {translated}" if _is_forbidden(translated) else None
    for ipv4 in _embedded_ipv4(address):
        if _is_forbidden(ipv4):
            return f"{address} embeds {ipv4}"
    return str(address) if _is_forbidden(address) else None


def _is_forbidden(address: Address) -> bool:
    """Whether the address itself is not public (embedded addresses: `_forbidden_reason`)."""
    translated = _translated_ipv4(address)
    if translated is not None:
        address = translated
    return (
        address in METADATA_ADDRESSES
        or address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def _url_shape_refusal(url: str) -> str | None:
    """Why POP never calls `url` whatever it resolves to, or None.

    User-info and backslashes are refused outright: parsers disagree about where the host of
    `http://127.0.0.1:1\\@example.com/` is, and `user:password@` would be sent along.
    """
    try:
        parts = urlsplit(url)
        port_error = None
        try:
            parts.port  # noqa: B018 (raises for a bad port)
        except ValueError as error:
            port_error = error
    except ValueError:
        return "This is not a valid URL."
    if parts.scheme not in ("http", "https"):
        return "Only http and https callback URLs are called."
    if "\\" in url:
        return "A callback URL may not contain a backslash."
    if "@" in parts.netloc:
        return "A callback URL may not contain user-info (user@host)."
    if not parts.hostname:
        return "A callback URL needs a host."
    if port_error is not None:
        return "A callback URL needs a valid port."
    return None


def callback_url_refusal(url: str, *, allow_private: bool | None = None) -> str | None:
    """Why a callback URL is refused at input, or None: the rules of delivery, applied to the
    URL as written (no DNS lookup: a host name is checked again at every delivery)."""
    problem = _url_shape_refusal(url)
    if problem is not None:
        return problem
    if allow_private is None:
        allow_private = bool(getattr(settings, "POP_CALLBACK_ALLOW_PRIVATE", False))
    if allow_private:
        return None
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host == LOOPBACK_NAMES[0] or host.endswith(LOOPBACK_NAMES[1]):
        return f"POP does not call non-public addresses ({host})."
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    reason = _forbidden_reason(address)
    return f"POP does not call non-public addresses ({reason})." if reason else None


def resolve_target(url: str, *, allow_private: bool | None = None) -> str | None:
    """Check `url` and return the address to connect to (None: let httpx resolve it).

    Raises RefusedURL for a scheme other than http/https, a missing host, user-info or a
    backslash in the URL, or (unless private addresses are allowed) a host any of whose
    addresses is not public, itself or by the IPv4 address it embeds. Raises OSError when
    the name does not resolve (a retryable failure).
    """
    problem = _url_shape_refusal(url)
    if problem is not None:
        raise RefusedURL(f"refused: {problem} ({url!r})")
    if allow_private is None:
        allow_private = bool(getattr(settings, "POP_CALLBACK_ALLOW_PRIVATE", False))
    if allow_private:
        return None
    parts = urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ipaddress.ip_address(info[4][0].split("%", 1)[0]) for info in infos]
    forbidden = sorted({reason for address in addresses if (reason := _forbidden_reason(address))})
    if forbidden or not addresses:
        raise RefusedURL(
            f"refused: {host} resolves to a non-public address ({', '.join(forbidden)}); "
            "set POP_CALLBACK_ALLOW_PRIVATE=true to allow it"
        )
    return str(addresses[0])
