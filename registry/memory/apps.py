"""App config for memory stores."""

from django.apps import AppConfig


class MemoryConfig(AppConfig):
    name = "registry.memory"
    label = "memory"
