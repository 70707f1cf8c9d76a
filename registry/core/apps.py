"""App config for registry.core (it owns the idempotency-key table, the OpenAPI extensions and the admin's
audit page)."""

from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "registry.core"
    label = "registry_core"

    def ready(self) -> None:
        from django.contrib import admin

        from registry.core import (
            admin_audit,  # noqa: F401  (registers the audit page)
            openapi,  # noqa: F401  (registers the authentication scheme)
        )
        from registry.core.ids import register_id_converters

        register_id_converters()
        # The registry serves no site beside the admin (even the API's schema needs a credential): no "View site".
        admin.site.site_url = None
