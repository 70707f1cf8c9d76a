"""App config for registry.core (it owns the idempotency-key table)."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "registry.core"
    label = "registry_core"
