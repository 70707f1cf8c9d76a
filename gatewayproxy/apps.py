"""App config for the gateway (its management commands and, later, its database-backed config)."""

from django.apps import AppConfig


class GatewayProxyConfig(AppConfig):
    name = "gatewayproxy"
    label = "gatewayproxy"
