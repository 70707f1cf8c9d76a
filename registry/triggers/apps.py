"""App config for triggers."""

from django.apps import AppConfig


class TriggersConfig(AppConfig):
    name = "registry.triggers"
    label = "triggers"
