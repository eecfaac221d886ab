from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "API tokens"

    def ready(self) -> None:
        # Registers the token scheme with drf-spectacular (extensions register on import).
        from accounts.api import schema  # noqa: F401
