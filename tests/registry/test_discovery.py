"""Discovery documents and health probes."""

from __future__ import annotations

import pytest

from tests.registry.helpers import assert_error


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


def test_no_groups_by_default(api):
    assert api.get("/apis").json()["groups"] == []
