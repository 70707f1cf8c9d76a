"""Discovery documents and health probes."""

from __future__ import annotations

import os

import httpx
import psycopg
import pytest

from tests.support.api_errors import assert_error
from tests.support.live import free_port, live_registry


@pytest.mark.django_db
def test_readyz_ready_when_migrated(client):
    assert client.get("/readyz").json() == {"status": "ready"}


@pytest.mark.django_db
def test_discovery_needs_credential(client):
    for path in ("/api", "/apis", "/apis/policy.registry.local/v1"):
        assert_error(client.get(path), 401, "authentication_error")


def test_api_versions(api):
    assert api.get("/api").json()["versions"] == ["v1"]
    resources = {item["name"] for item in api.get("/api/v1").json()["resources"]}
    assert {"agents", "environments"} <= resources


def test_apis_lists_exactly_the_configured_groups(api, settings):
    settings.REGISTRY_EXTENSION_DOMAIN = "ext.example.com"
    settings.REGISTRY_EXTENSION_GROUPS = ["policy", "pricing", "cloud"]
    groups = api.get("/apis").json()
    assert groups["kind"] == "APIGroupList"
    assert [group["name"] for group in groups["groups"]] == ["policy.ext.example.com", "pricing.ext.example.com"]
    assert groups["groups"][0]["preferredVersion"] == {"groupVersion": "policy.ext.example.com/v1", "version": "v1"}
    policy = api.get("/apis/policy.ext.example.com/v1").json()
    assert policy["kind"] == "APIResourceList"
    assert {resource["name"] for resource in policy["resources"]} == {"guardrails", "guardrailtypes"}
    assert_error(api.get("/apis/runtime.ext.example.com/v1"), 404, "not_found_error")
    assert_error(api.get("/apis/cloud.ext.example.com/v1"), 404, "not_found_error")


def test_policy_and_pricing_are_served_by_default(api):
    names = [group["name"] for group in api.get("/apis").json()["groups"]]
    assert names == ["policy.registry.local", "pricing.registry.local"]
    assert api.get("/apis/pricing.registry.local/v1").status_code == 200
    assert_error(api.get("/apis/runtime.registry.local/v1"), 404, "not_found_error")


def test_the_setting_narrows_the_groups(api, settings):
    settings.REGISTRY_EXTENSION_GROUPS = ["pricing"]
    assert [group["name"] for group in api.get("/apis").json()["groups"]] == ["pricing.registry.local"]
    assert_error(api.get("/apis/policy.registry.local/v1"), 404, "not_found_error")


def test_readyz_is_503_when_the_database_is_unreachable_or_unmigrated():
    """A live registry on a database that refuses connections, then on an empty (unmigrated) one."""
    name = f"registry_unmigrated_{os.getpid()}"
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        cases = {
            f"postgres://postgres@127.0.0.1:{free_port()}/nothing": "database unreachable",
            f"postgres://postgres@127.0.0.1:5432/{name}": "not applied",
        }
        for database_url, reason in cases.items():
            with live_registry(DATABASE_URL=database_url, DATABASE_POOL_TIMEOUT="2") as url:
                assert httpx.get(f"{url}/healthz").status_code == 200
                response = httpx.get(f"{url}/readyz")
                assert response.status_code == 503 and reason in response.json()["error"]["message"]
    finally:
        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
