"""The registry's `/metrics` under daphne: request counts by route, the database pool, and who may read
them (loopback clients by default, the bearer of REGISTRY_METRICS_TOKEN once it is set)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.observability import outside_address, sample

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOKEN = "metrics-test-token"


def healthz_count(port: int) -> float:
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics")
    assert metrics.status_code == 200
    return sample(metrics.text, "registry_http_requests_total", method="GET", route="healthz", status="200") or 0


def test_metrics_count_requests_for_loopback_clients_only(start_daphne):
    port = start_daphne()  # its start was awaited on /healthz
    before = healthz_count(port)
    for _ in range(3):
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/v1/nowhere").status_code == 404

    assert healthz_count(port) == before + 3
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert sample(metrics, "registry_http_requests_total", route="unmatched", status="404") == 1
    assert sample(metrics, "registry_http_request_duration_seconds_count", route="healthz") == before + 3

    refused = httpx.get(f"http://{outside_address()}:{port}/metrics")
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
    assert refused.headers["request-id"] == refused.json()["request_id"]


def test_with_a_token_only_its_bearer_reads_metrics_and_the_pool_is_shown(start_daphne):
    port = start_daphne(REGISTRY_METRICS_TOKEN=TOKEN, DJANGO_SETTINGS_MODULE="settings.base")
    url = f"http://127.0.0.1:{port}/metrics"
    assert httpx.get(url).status_code == 401  # loopback is no longer enough
    assert httpx.get(url, headers={"authorization": "Bearer wrong"}).status_code == 401

    metrics = httpx.get(f"http://{outside_address()}:{port}/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert metrics.status_code == 200
    assert sample(metrics.text, "registry_http_requests_total", route="metrics", status="401") == 2
    assert sample(metrics.text, "registry_db_pool_max", alias="default") == 20
    assert (sample(metrics.text, "registry_db_pool_size", alias="default") or 0) >= 1
