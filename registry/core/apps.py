"""App config for registry.core (it owns the idempotency-key table and the OpenAPI extensions)."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "registry.core"
    label = "registry_core"

    def ready(self) -> None:
        from registry.core import openapi  # noqa: F401  (registers the authentication scheme)
        from registry.core.ids import register_id_converters

        register_id_converters()
