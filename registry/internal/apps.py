"""App config for the internal gateway endpoints."""

from django.apps import AppConfig


class InternalConfig(AppConfig):
    name = "registry.internal"
    label = "internal"
