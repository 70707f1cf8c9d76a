"""App config for webhooks."""

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "registry.webhooks"
    label = "webhooks"
