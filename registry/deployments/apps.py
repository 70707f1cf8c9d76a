"""App config for deployments."""

from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "registry.deployments"
    label = "deployments"
