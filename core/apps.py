from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The bottom of the house: what every POP app builds on, importing none of them."""

    name = "core"
    verbose_name = "POP core"
