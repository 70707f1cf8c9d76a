"""The store and legacy tests' pieces: a database-backed gateway (`Gateway(database=...)`, served through
`GatewayFactory.around`), the documents they import with `manage.py gateway import`, and the database mark of
tests whose gateways read committed rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from gatewayproxy.app import Gateway
from gatewayproxy.store.source import DatabaseConfig
from tests.support.gateway.documents import destination, one_destination
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import loopback_config

FAST_POLL_SECONDS = 0.1
# Rows committed for real (gateway threads read them), flushed after each test: only the store's tables.
STORE_ONLY_DATABASE = pytest.mark.django_db(transaction=True, available_apps=["gatewayproxy", "gatewayproxy.store"])


def provider_document(provider: FakeProvider, **extra: Any) -> dict[str, Any]:
    """One vendor-A destination behind a catch-all route, listening on loopback, draining for up to 5 s; `extra`
    are more sections (replacing those of the same name) or `one_destination`'s options."""
    upstream = destination("vendor_a", f"{provider.url}/v1")
    return loopback_config(one_destination(upstream, **{"server": {"limits": {"drain_timeout_ms": 5000}}, **extra}))


def import_document(directory: Path, document: dict[str, Any]) -> None:
    """`manage.py gateway import` of `document` written as YAML under `directory`."""
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    call_command("gateway", "import", str(path))


def database_gateway(poll_seconds: float = FAST_POLL_SECONDS) -> Gateway:
    """A gateway serving the stored config, polling the version every `poll_seconds` (not started)."""
    return Gateway(database=DatabaseConfig(poll_seconds))
