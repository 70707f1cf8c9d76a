"""The OpenAPI document: valid OpenAPI 3, and true of the live server under schemathesis.

Schemathesis generates requests for the agent, environment and discovery operations and checks
that none is answered 5xx and that every answer matches the schema of its documented status.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.support.tenants import Tenant, make_tenant

FUZZED_PATHS = r"^/(v1/agents|v1/environments|api$|api/|apis)"
CHECKS = [not_a_server_error, response_schema_conformance]
FUZZ_SETTINGS = settings(
    max_examples=20,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)


def generated_document() -> dict[str, Any]:
    """The document `/openapi.json` serves, generated in-process (as plain JSON types)."""
    document = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(document))  # type: ignore[no-any-return]


REGISTRY_SCHEMA = schemathesis.openapi.from_dict(generated_document()).include(path_regex=FUZZED_PATHS)


def test_served_schema_is_valid_openapi_3(api: Any) -> None:
    response = api.get("/openapi.json")

    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    validate_schema(document)
    assert document == generated_document()


@pytest.fixture
def fuzzed_tenant(transactional_db: None) -> Tenant:
    """A workspace with an agent and an environment, so lists and lookups answer with real objects."""
    tenant = make_tenant("fuzzed")
    tenant.client.post("/v1/agents", {"name": "seed", "model": "claude-sonnet-4-5"}, format="json")
    tenant.client.post("/v1/environments", {"name": "seed"}, format="json")
    return tenant


@REGISTRY_SCHEMA.parametrize()
@FUZZ_SETTINGS
def test_live_server_keeps_its_schema(case: Any, live_server: Any, fuzzed_tenant: Tenant) -> None:
    case.call_and_validate(
        base_url=live_server.url, headers={"x-api-key": fuzzed_tenant.api_key}, checks=CHECKS, timeout=10
    )
