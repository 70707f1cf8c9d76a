"""Idempotency keys: replay, mismatch, in-flight conflict, scoping, and 20 concurrent requests."""

from __future__ import annotations

import threading

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from registry.agents.models import Agent
from registry.core.models import IdempotencyKey
from tests.support.api_errors import assert_error
from tests.support.tenants import make_tenant

BODY = {"name": "once", "model": "m"}


def post(api, body, key):
    return api.post("/v1/agents", body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_same_key_same_body_replays(api):
    first = post(api, BODY, "k1")
    second = post(api, BODY, "k1")
    assert second.status_code == 200
    assert second.json() == first.json()
    assert second["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first
    assert Agent.objects.count() == 1


def test_same_key_other_body_is_422(api):
    post(api, BODY, "k2")
    assert_error(post(api, {**BODY, "name": "twice"}, "k2"), 422, "invalid_request_error", "Idempotency-Key")
    assert Agent.objects.count() == 1


def test_errors_are_replayed(api):
    first = post(api, {"name": "no model"}, "k3")
    assert first.status_code == 400
    second = post(api, {"name": "no model"}, "k3")
    assert second.status_code == 400 and second["idempotent-replayed"] == "true"
    assert second.json()["error"] == first.json()["error"]


def test_in_flight_key_is_409(api, tenant):
    IdempotencyKey.objects.create(workspace_id=tenant.workspace.id, key="k4", fingerprint="x")
    assert_error(post(api, BODY, "k4"), 422, "invalid_request_error")
    response = api.post("/v1/agents", BODY, format="json", HTTP_IDEMPOTENCY_KEY="k5")
    IdempotencyKey.objects.filter(key="k5").update(state=IdempotencyKey.State.IN_PROGRESS)
    assert_error(post(api, BODY, "k5"), 409, "conflict_error", "in progress")
    assert response.status_code == 200


def test_key_too_long_is_400(api):
    assert_error(post(api, BODY, "k" * 256), 400, "invalid_request_error", "Idempotency-Key")
    assert Agent.objects.count() == 0


def test_keys_are_scoped_per_workspace(api, other_tenant):
    post(api, BODY, "shared")
    response = other_tenant.client.post("/v1/agents", BODY, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    assert response.status_code == 200 and "idempotent-replayed" not in response
    assert Agent.objects.count() == 2


def test_update_and_archive_accept_keys(api):
    agent = post(api, BODY, "c").json()
    path = f"/v1/agents/{agent['id']}"
    api.post(path, {"system": "a"}, format="json", HTTP_IDEMPOTENCY_KEY="u")
    replay = api.post(path, {"system": "a"}, format="json", HTTP_IDEMPOTENCY_KEY="u")
    assert replay["idempotent-replayed"] == "true"
    assert api.get(path).json()["version"] == 2


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_requests_create_exactly_one(live_server):
    tenant = make_tenant("race")
    barrier = threading.Barrier(20)
    results: list[tuple[int, dict]] = []

    def send() -> None:
        with httpx.Client(base_url=live_server.url, timeout=30) as client:
            barrier.wait()
            response = client.post(
                "/v1/agents", json=BODY, headers={"x-api-key": tenant.api_key, "Idempotency-Key": "race-key"}
            )
            results.append((response.status_code, response.json()))

    threads = [threading.Thread(target=send) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Agent.objects.filter(workspace=tenant.workspace).count() == 1
    assert IdempotencyKey.objects.filter(key="race-key").count() == 1
    created_ids = {body["id"] for status, body in results if status == 200}
    assert len(created_ids) == 1
    assert {status for status, _ in results} <= {200, 409}


def test_large_idempotent_upload_is_hashed_without_the_json_body_limit(api, settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path)}},
    }
    payload = b"x" * (3 * 1024 * 1024)  # over REGISTRY_MAX_BODY_BYTES (2 MiB), under the upload limit
    send = [
        api.post(
            "/v1/files",
            {"file": SimpleUploadedFile("big.bin", payload)},
            format="multipart",
            HTTP_IDEMPOTENCY_KEY="big-upload",
        )
        for _ in range(2)
    ]
    assert [response.status_code for response in send] == [200, 200]
    assert send[1]["idempotent-replayed"] == "true" and send[0].json() == send[1].json()
    assert send[0].json()["size_bytes"] == len(payload)
    other = api.post(
        "/v1/files",
        {"file": SimpleUploadedFile("big.bin", payload[:-1] + b"y")},
        format="multipart",
        HTTP_IDEMPOTENCY_KEY="big-upload",
    )
    assert_error(other, 422, "invalid_request_error", "Idempotency-Key")
