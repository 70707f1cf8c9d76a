"""App config of the gateway's database-backed configuration rows."""

from django.apps import AppConfig


class StoreConfig(AppConfig):
    """The `store` app: destinations, routes, limits, vaults, plugins and singleton sections as rows."""

    name = "gatewayproxy.store"
    label = "store"
    verbose_name = "Gateway configuration"
