"""Who may see which API tokens: their owner, and staff."""

from hmac import compare_digest

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.utils import timezone
from knox.crypto import hash_token
from knox.settings import CONSTANTS

from accounts.models import ApiToken
from core.principals import Principal, principal_is_staff


def token_list(*, principal: Principal) -> QuerySet[ApiToken]:
    """The principal's own tokens; every token for staff and the system."""
    tokens = ApiToken.objects.select_related("user")
    if principal_is_staff(principal):
        return tokens
    if not principal.is_authenticated:
        return tokens.none()
    return tokens.filter(user=principal)


def token_list_for_user(*, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    """One user's tokens; the caller has checked it may see them."""
    return ApiToken.objects.select_related("user").filter(user=user)


def token_matching(key: str) -> ApiToken | None:
    """The token whose key is `key` (expired or not), or None; compares SHA-512 digests.

    `token_key` (the key's first 15 characters, indexed) narrows the candidates to one row
    almost always.
    """
    digest = hash_token(key)
    candidates = ApiToken.objects.filter(token_key=key[: CONSTANTS.TOKEN_KEY_LENGTH])
    for token in candidates.select_related("user"):
        if compare_digest(digest, token.digest):
            return token
    return None


def token_for_key(key: str) -> ApiToken | None:
    """The live (unexpired) token whose key is `key`, or None."""
    token = token_matching(key)
    return token if token is not None and not token.is_expired(timezone.now()) else None
