"""App config for environments."""

from django.apps import AppConfig


class EnvironmentsConfig(AppConfig):
    name = "registry.environments"
    label = "environments"
