"""App config for discovery and health."""

from django.apps import AppConfig


class DiscoveryConfig(AppConfig):
    name = "registry.discovery"
    label = "discovery"
