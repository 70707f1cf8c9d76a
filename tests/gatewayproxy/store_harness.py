"""Gateways for the store and legacy tests in a background thread: one serving an already loaded config,
one database-backed (`Gateway(database=...)`); and the documents the store tests import."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import uvloop
from django.core.management import call_command

from gatewayproxy.app import Gateway
from gatewayproxy.store.source import DatabaseConfig
from tests.gatewayproxy.fake_provider import FakeProvider
from tests.gatewayproxy.harness import GatewayThread, loopback_config

FAST_POLL_SECONDS = 0.1
# Rows committed for real (gateway threads read them), flushed after each test: only the store's tables.
STORE_ONLY_DATABASE = pytest.mark.django_db(transaction=True, available_apps=["gatewayproxy", "gatewayproxy.store"])


def provider_document(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    """One vendor-A destination behind a catch-all route (the vault reads PATH, always set)."""
    return loopback_config(
        {
            "server": {"limits": {"drain_timeout_ms": 5000}},
            "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
            "destinations": {
                "one": {"kind": "vendor_a", "base_url": f"{provider.url}/v1", "credentials": {"vault": "v"}}
            },
            "routes": [{"name": "all", "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}],
            **extra,
        }
    )


def import_document(directory: Any, document: dict[str, Any]) -> None:
    """`manage.py gateway import` of `document` written as YAML under `directory`."""
    import yaml

    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    call_command("gateway", "import", str(path))


class BuiltGatewayThread(GatewayThread):
    """A `GatewayThread` around a gateway the caller built (database-backed, or from a legacy document)."""

    def __init__(self, gateway: Gateway) -> None:
        self.loop = uvloop.new_event_loop()
        self.gateway = gateway
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._openai = None
        self._anthropic = None

    def start(self) -> BuiltGatewayThread:
        """Start the loop and the gateway."""
        super().start()
        return self


def database_gateway(poll_seconds: float = FAST_POLL_SECONDS) -> BuiltGatewayThread:
    """A gateway serving the stored config, polling the version every `poll_seconds` (not started)."""
    return BuiltGatewayThread(Gateway(database=DatabaseConfig(poll_seconds)))
