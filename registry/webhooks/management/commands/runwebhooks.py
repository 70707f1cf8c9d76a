"""`python manage.py runwebhooks`: the webhook sender with its health server (`/healthz`, `/readyz`, `/metrics`
on `REGISTRY_HEALTH_PORT`, default 9102); start several on PostgreSQL, one on SQLite."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from registry.core.observability import health_server
from registry.webhooks import metrics
from registry.webhooks.config import DeliveryConfig
from registry.webhooks.delivery import HEALTH_PORT, Deliverer


class Command(BaseCommand):
    """Delivers the outbox's webhook events; the tunables are the `REGISTRY_WEBHOOK_*` settings."""

    help = "Run the webhook sender (several may share the outbox on PostgreSQL)."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = DeliveryConfig.from_settings()
        except ValueError as error:
            raise CommandError(str(error)) from error
        deliverer = Deliverer(config)
        deliverer.run(health=health_server(HEALTH_PORT, deliverer.readiness, metrics.SCRAPED))
