"""App config for vaults."""

from django.apps import AppConfig


class VaultsConfig(AppConfig):
    name = "registry.vaults"
    label = "vaults"
