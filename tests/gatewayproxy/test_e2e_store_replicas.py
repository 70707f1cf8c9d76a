"""Several gateways on one database converge: each polls the config version and swaps in what another
wrote; a stored config that fails validation is not served, the last good snapshot is kept."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest
from django.db.models import F

from fakes.waiting import wait_until
from gatewayproxy.store.models import ConfigVersion, Route
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.store import STORE_ONLY_DATABASE, database_gateway, import_document, provider_document
from tests.support.gateway.thread import GatewayFactory, GatewayThread

pytestmark = [pytest.mark.e2e, STORE_ONLY_DATABASE]
ROUTE = {"match": {"model": "new"}, "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}


@pytest.fixture
def replicas(
    gateway_factory: GatewayFactory, tmp_path: Path, primary: FakeProvider
) -> tuple[GatewayThread, GatewayThread]:
    import_document(tmp_path, provider_document(primary, match="m"))
    return gateway_factory.around(database_gateway()), gateway_factory.around(database_gateway())


def status_of(gateway: GatewayThread, model: str) -> int:
    return httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": model, "messages": []}).status_code


def until(condition: object, timeout: float = 10.0) -> float:
    """Seconds until `condition()` held."""
    started = time.monotonic()
    wait_until(condition, timeout=timeout)  # type: ignore[arg-type]
    return time.monotonic() - started


def test_a_write_on_one_replica_reaches_the_other(replicas: tuple[GatewayThread, GatewayThread]) -> None:
    first, second = replicas
    assert status_of(second, "new") == 404
    assert httpx.put(f"{first.admin_url}/admin/v1/routes/new", json=ROUTE).status_code == 200
    assert status_of(first, "new") == 200
    assert until(lambda: status_of(second, "new") == 200) < 3
    assert httpx.delete(f"{second.admin_url}/admin/v1/routes/new").status_code == 204
    until(lambda: status_of(first, "new") == 404)
    assert second.gateway.database is not None and first.gateway.database is not None
    assert first.gateway.database.version == second.gateway.database.version == 3


def test_an_invalid_stored_config_keeps_the_last_good_snapshot(
    replicas: tuple[GatewayThread, GatewayThread], caplog: pytest.LogCaptureFixture
) -> None:
    first, _ = replicas
    assert first.gateway.runtime is not None and first.gateway.database is not None
    serving = first.gateway.runtime.state
    # A row written around the services (by hand, or by an older release) that no longer validates.
    Route.objects.filter(name="all").update(
        body={"strategy": {"mode": "fallback", "targets": [{"destination": "gone"}]}}
    )
    ConfigVersion.objects.filter(pk=1).update(number=F("number") + 1)
    with caplog.at_level(logging.WARNING, logger="gatewayproxy.store"):
        until(lambda: "config version 2 is invalid" in caplog.text)
    assert "destination 'gone' is not declared" in caplog.text
    assert first.gateway.runtime.state is serving and first.gateway.database.version == 1
    assert status_of(first, "m") == 200
