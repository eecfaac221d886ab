"""API token writes: issue (the key is shown once), revoke, and the throttled last-use stamp.

Each public write checks the caller first and runs in one transaction. `principal=SYSTEM` is
the trusted system (management commands, other services that checked authority themselves and
record the change in the audit trail themselves).
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import ApiToken
from audit.services import audit_record
from core.principals import SYSTEM, Principal, principal_is_staff

#: `last_used_at` is rewritten at most this often per token, so a busy puller costs no writes.
LAST_USED_RESOLUTION = timedelta(seconds=60)
NAME_MAX_LENGTH = ApiToken._meta.get_field("name").max_length


class Lifetime(Enum):
    """`lifetime=Lifetime.DEFAULT`: POP_TOKEN_TTL_DAYS (0 there means no expiry)."""

    DEFAULT = "default"


@dataclass(frozen=True)
class IssuedToken:
    """A new token and its key; the key exists only here, the database keeps its hash."""

    token: ApiToken
    key: str


def default_lifetime() -> timedelta | None:
    days = settings.POP_TOKEN_TTL_DAYS
    return timedelta(days=days) if days > 0 else None


def _require_owner_or_staff(principal: Principal, user: AbstractBaseUser) -> None:
    if principal_is_staff(principal):
        return
    if not principal.is_authenticated or principal.pk != user.pk:
        raise PermissionDenied("Only the token's owner or staff may do this.")


def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["This field may not be blank."]})
    if len(name) > NAME_MAX_LENGTH:
        raise ValidationError({"name": [f"At most {NAME_MAX_LENGTH} characters."]})
    return name


@transaction.atomic
def token_issue(
    *,
    principal: Principal,
    user: AbstractBaseUser,
    name: str,
    lifetime: timedelta | None | Lifetime = Lifetime.DEFAULT,
) -> IssuedToken:
    """A new named token for `user` (the user themself, or staff); the key is returned once.

    `lifetime=None` never expires. The user's expired tokens are deleted on the way.
    """
    _require_owner_or_staff(principal, user)
    name = _clean_name(name)
    if lifetime is Lifetime.DEFAULT:
        lifetime = default_lifetime()
    ApiToken.objects.filter(user=user, expiry__lte=timezone.now()).delete()
    token, key = ApiToken.objects.create(user=user, expiry=lifetime, name=name)
    if principal is not SYSTEM:  # SYSTEM: a trusted caller, which records the change itself
        audit_record(
            action="token.issue",
            principal=principal,
            target=token,
            detail={"user": user.get_username(), "name": name},
        )
    return IssuedToken(token=token, key=key)


@transaction.atomic
def token_revoke(*, principal: Principal, token: ApiToken) -> None:
    """Revoke one token (its owner, or staff): it stops authenticating at once."""
    _require_owner_or_staff(principal, token.user)
    if principal is not SYSTEM:  # SYSTEM: a trusted caller, which records the change itself
        audit_record(action="token.revoke", principal=principal, target=token)
    ApiToken.objects.filter(pk=token.pk).delete()


@transaction.atomic
def tokens_revoke_for_user(*, principal: Principal, user: AbstractBaseUser) -> int:
    """Revoke every token of `user` (the user themself, or staff); returns how many."""
    _require_owner_or_staff(principal, user)
    if principal is not SYSTEM:  # SYSTEM: a trusted caller, which records the change itself
        audit_record(action="token.revoke_all", principal=principal, target=user)
    return ApiToken.objects.filter(user=user).delete()[0]


def token_touch(token: ApiToken, *, now: datetime) -> bool:
    """Stamp `last_used_at`, at most once per LAST_USED_RESOLUTION; True when it wrote.

    Called on every authenticated request: the in-memory check skips the database almost
    always, and the conditional UPDATE keeps concurrent requests from stamping twice.
    """
    stale_before = now - LAST_USED_RESOLUTION
    if token.last_used_at is not None and token.last_used_at > stale_before:
        return False
    written = (
        ApiToken.objects.filter(pk=token.pk)
        .filter(Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale_before))
        .update(last_used_at=now)
    )
    if written:
        token.last_used_at = now
    return bool(written)
