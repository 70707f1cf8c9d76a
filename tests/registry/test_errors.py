"""The error envelope: every failure, from routing to crashes, is JSON with a type and a request id."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import include, path

from registry.workspaces import services
from settings import urls as project_urls
from tests.support.api_errors import assert_error


def crash(request):
    raise RuntimeError("boom with a secret-looking detail")


# This module doubles as a URLconf: the project's routes and handlers, plus one view that crashes.
urlpatterns = [path("crash", crash), path("", include(project_urls))]
handler500 = project_urls.handler500


@pytest.mark.django_db
def test_unknown_path_is_404_envelope(client):
    assert_error(client.get("/nope"), 404, "not_found_error")


def test_old_registry_prefix_is_404(api):
    assert_error(api.get("/v1/registry/agents"), 404, "not_found_error")


@pytest.mark.parametrize(
    "path", ["/v1/agents/env_abc", "/v1/agents/agent_", "/v1/environments/agent_abc", "/v1/agents/agent_a$b"]
)
def test_id_of_wrong_shape_is_404(api, path):
    assert_error(api.get(path), 404, "not_found_error")


def test_missing_agent_is_404(api):
    assert_error(api.get("/v1/agents/agent_doesnotexist000000000000"), 404, "not_found_error", "agent_doesnotexist")


def test_method_not_allowed_is_enveloped(api):
    assert_error(api.put("/v1/agents", {}, format="json"), 405, "invalid_request_error")


def test_malformed_json_is_400(api):
    response = api.post("/v1/agents", data=b'{"name": "x",', content_type="application/json")
    assert_error(response, 400, "invalid_request_error", "Malformed")


def test_body_over_limit_is_413_and_writes_nothing(api, settings):
    settings.REGISTRY_MAX_BODY_BYTES = 1000
    response = api.post("/v1/agents", {"name": "x", "model": "m", "system": "y" * 2000}, format="json")
    assert_error(response, 413, "request_too_large")
    assert api.get("/v1/agents").json()["data"] == []


def test_wrong_type_names_field(api):
    response = api.post("/v1/agents", {"name": 5, "model": ["not", "a", "model"]}, format="json")
    assert_error(response, 400, "invalid_request_error", "model")


@pytest.mark.django_db
def test_no_credential_is_401(client):
    response = client.get("/v1/agents")
    assert_error(response, 401, "authentication_error")


@pytest.mark.django_db
def test_invalid_api_key_is_401(client):
    assert_error(client.get("/v1/agents", HTTP_X_API_KEY="sk-reg-wrong"), 401, "authentication_error")


def test_revoked_key_is_401(tenant, client):
    issued = services.api_key_issue(workspace=tenant.workspace)
    assert client.get("/v1/agents", HTTP_X_API_KEY=issued.plaintext).status_code == 200
    services.api_key_revoke(api_key=issued.api_key)
    assert_error(client.get("/v1/agents", HTTP_X_API_KEY=issued.plaintext), 401, "authentication_error")


def test_api_key_records_last_use(tenant):
    issued = services.api_key_issue(workspace=tenant.workspace)
    assert issued.api_key.last_used_at is None
    tenant.client.credentials(HTTP_X_API_KEY=issued.plaintext)
    tenant.client.get("/v1/agents")
    issued.api_key.refresh_from_db()
    assert issued.api_key.last_used_at is not None


def test_api_key_is_stored_only_as_digest(tenant):
    api_key = tenant.workspace.api_keys.get()
    assert tenant.api_key not in (api_key.digest, api_key.display_prefix, api_key.name)
    assert len(api_key.digest) == 64


def test_sdk_headers_and_beta_query_are_ignored(api):
    response = api.get(
        "/v1/agents?beta=true",
        HTTP_ANTHROPIC_BETA="managed-agents-2026-04-01",
        HTTP_ANTHROPIC_VERSION="2023-06-01",
        HTTP_COMPAT_BETA="anything",
        HTTP_ANTHROPIC_WORKSPACE_ID="wsp_other",
    )
    assert response.status_code == 200


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__, DEBUG_PROPAGATE_EXCEPTIONS=False)
def test_crash_is_500_envelope_without_traceback(client):
    client.raise_request_exception = False
    response = client.get("/crash")
    body = assert_error(response, 500, "api_error")
    assert "boom" not in response.content.decode()
    assert "Traceback" not in response.content.decode()
    assert body["error"]["message"] == "Internal server error."
