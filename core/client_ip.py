"""The client's address, by the same rule as DRF's throttles (`NUM_PROXIES`).

With no trusted proxy (POP_NUM_PROXIES=0, the default) the address is REMOTE_ADDR and
X-Forwarded-For is ignored: a caller that sets the header cannot pick its own address. With N
trusted proxies the client is the N-th address from the right of X-Forwarded-For, the one the
outermost trusted proxy appended; anything left of it was written by the caller.
"""

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str | None:
    """The address django-axes counts failed logins against (AXES_CLIENT_IP_CALLABLE)."""
    remote = request.META.get("REMOTE_ADDR") or None
    proxies = int(getattr(settings, "POP_NUM_PROXIES", 0))
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies <= 0 or not forwarded:
        return remote
    addresses = [part.strip() for part in forwarded.split(",") if part.strip()]
    if not addresses:
        return remote
    return addresses[-min(proxies, len(addresses))]
