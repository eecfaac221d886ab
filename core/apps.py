from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The bottom of the house: what every POP app builds on, importing none of them."""

    name = "core"
    verbose_name = "POP core"

    def ready(self) -> None:
        from core.timestamp_loader import use_on_new_connections

        use_on_new_connections()
