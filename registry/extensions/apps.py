"""App config for the extension groups."""

from django.apps import AppConfig


class ExtensionsConfig(AppConfig):
    name = "registry.extensions"
    label = "extensions"
