"""`Authorization: Token <key>` against the hashed, named tokens of accounts.ApiToken."""

import binascii
from typing import Any

from django.utils import timezone
from knox.auth import TokenAuthentication
from rest_framework import exceptions

from accounts.models import ApiToken
from accounts.selectors import token_matching
from accounts.services import token_touch

#: Keys are 64 hex characters (legacy DRF keys 40); anything much longer is not a key.
MAX_KEY_LENGTH = 200


def _scheme(request: Any) -> str:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    return header.split(" ", 1)[0].lower() if isinstance(header, str) else ""


class ApiTokenAuthentication(TokenAuthentication):
    """knox's scheme with one read per request, 401 for expired keys, and a last-use stamp.

    On success the Django request carries `pop_token_id` and `pop_token_name`, for logs and
    audit records written outside DRF.
    """

    def authenticate(self, request: Any) -> tuple[Any, ApiToken] | None:
        result = super().authenticate(request)
        if result is None and _scheme(request) == "bearer":
            # The most common first mistake: say what to send instead of "not provided".
            raise exceptions.AuthenticationFailed(
                "The authorization scheme is Token, not Bearer: send `Authorization: Token <key>`."
            )
        if result is not None:
            token, django_request = result[1], getattr(request, "_request", request)
            django_request.pop_token_id = str(token.pk)
            django_request.pop_token_name = token.name
        return result

    def authenticate_credentials(self, token: bytes) -> tuple[Any, ApiToken]:
        try:
            key = token.decode("ascii")
        except UnicodeDecodeError as error:
            raise exceptions.AuthenticationFailed("Invalid token.") from error
        if not key.isprintable() or len(key) > MAX_KEY_LENGTH:
            raise exceptions.AuthenticationFailed("Invalid token.")
        try:
            match = token_matching(key)
        except (TypeError, binascii.Error) as error:
            raise exceptions.AuthenticationFailed("Invalid token.") from error
        if match is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        now = timezone.now()
        if match.is_expired(now):
            raise exceptions.AuthenticationFailed("Token expired.")
        user, _ = self.validate_user(match)
        token_touch(match, now=now)
        return user, match
