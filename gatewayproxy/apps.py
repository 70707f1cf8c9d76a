"""App config for the gateway (its management commands and, later, its database-backed config)."""

from django.apps import AppConfig


class GatewayProxyConfig(AppConfig):
    """The gateway's Django app: it registers the `rungateway` command."""

    name = "gatewayproxy"
    label = "gatewayproxy"
