"""How the OpenAPI schema describes `Authorization: Token <key>` (drf-spectacular)."""

from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme


class ApiTokenScheme(KnoxTokenScheme):
    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "tokenAuth"
