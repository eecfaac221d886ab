from django.apps import AppConfig


class TriggersConfig(AppConfig):
    name = "triggers"
