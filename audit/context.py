"""The HTTP request being served, for audit records written deep inside services.

Services take a `principal` but not the request; the address, the token name and the
correlation id of an audit record come from here. Set by audit.middleware for the length of
one request; None outside one (django-q tasks, management commands, threads). A background
job acting for a user (actions on a set) names that user with `principal_bound`.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.http import HttpRequest

_current_request: ContextVar[HttpRequest | None] = ContextVar("pop_audit_request", default=None)


def current_request() -> HttpRequest | None:
    """The Django request this code runs for, or None outside a request."""
    return _current_request.get()


@contextmanager
def request_bound(request: HttpRequest) -> Iterator[None]:
    """Make `request` the current request until the block ends (also on error)."""
    token = _current_request.set(request)
    try:
        yield
    finally:
        _current_request.reset(token)


_acting_principal: ContextVar[object | None] = ContextVar("pop_audit_principal", default=None)


def acting_principal() -> object | None:
    """Who a background job acts for (`principal_bound`), or None."""
    return _acting_principal.get()


@contextmanager
def principal_bound(principal: object) -> Iterator[None]:
    """Outside a request (a job acting for a user): records written in the block name
    `principal` as the actor unless they name one."""
    token = _acting_principal.set(principal)
    try:
        yield
    finally:
        _acting_principal.reset(token)
