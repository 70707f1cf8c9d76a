"""Environments: defaults, partial updates that keep omitted config, archive, delete, validation."""

from __future__ import annotations

import pytest

from registry.environments.models import Environment
from tests.support.api_errors import assert_error


def create(api, body):
    response = api.post("/v1/environments", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_create_fills_defaults(api):
    environment = create(api, {"name": "sandbox"})
    assert environment["id"].startswith("env_")
    assert environment["type"] == "environment"
    assert environment["config"] == {
        "type": "cloud",
        "networking": {"type": "unrestricted"},
        "packages": {"type": "packages", "apt": [], "cargo": [], "gem": [], "go": [], "npm": [], "pip": []},
    }
    assert environment["scope"] == "organization"
    assert environment["metadata"] == {} and environment["description"] is None


def test_update_keeps_omitted_config_fields(api):
    environment = create(api, {"name": "e", "config": {"type": "cloud", "packages": {"pip": ["requests"]}}})
    updated = api.post(
        f"/v1/environments/{environment['id']}",
        {"config": {"type": "cloud", "packages": {"npm": ["left-pad"]}}, "description": "d"},
        format="json",
    ).json()
    assert updated["config"]["packages"]["pip"] == ["requests"]
    assert updated["config"]["packages"]["npm"] == ["left-pad"]
    assert updated["config"]["networking"] == {"type": "unrestricted"}
    assert updated["description"] == "d" and updated["name"] == "e"


def test_limited_networking(api):
    environment = create(
        api,
        {
            "name": "e",
            "config": {
                "type": "cloud",
                "networking": {"type": "limited", "allowed_hosts": ["api.example.com"], "allow_package_managers": True},
                "packages": {"apt": ["curl"]},
            },
        },
    )
    assert environment["config"]["networking"] == {
        "type": "limited",
        "allow_mcp_servers": False,
        "allow_package_managers": True,
        "allowed_hosts": ["api.example.com"],
    }


def test_self_hosted_config(api):
    assert create(api, {"name": "e", "config": {"type": "self_hosted"}})["config"] == {"type": "self_hosted"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": "e", "config": {"type": "moon"}}, "type"),
        ({"name": "e", "config": {"type": "cloud", "networking": {"type": "sideways"}}}, "type"),
        ({"name": "e", "config": {"type": "cloud", "packages": {"pip": "requests"}}}, "pip"),
        (
            {"name": "e", "config": {"type": "cloud", "networking": {"type": "limited"}, "packages": {"pip": ["x"]}}},
            "allow_package_managers",
        ),
        ({"name": "e", "scope": "galaxy"}, "scope"),
        ({"name": "e", "metadata": {"k": 1}}, "metadata"),
    ],
)
def test_invalid_bodies_are_400_and_write_nothing(api, body, field):
    assert_error(api.post("/v1/environments", body, format="json"), 400, "invalid_request_error", field)
    assert Environment.objects.count() == 0


@pytest.mark.parametrize(
    "name",
    ["requests; rm -rf /", "a|b", "a&b", "$(id)", "`id`", "it's", '"x"', "a b", "pkg*", "x?", "{a}", "-e", "--pre"],
)
def test_package_names_with_shell_characters_are_400_and_write_nothing(api, name):
    body = {"name": "e", "config": {"type": "cloud", "packages": {"npm": ["left-pad"], "pip": ["ok", name]}}}
    assert_error(api.post("/v1/environments", body, format="json"), 400, "invalid_request_error", "pip")
    assert Environment.objects.count() == 0


def test_package_specifiers_keep_what_installers_need(api):
    names = ["requests[socks]>=2.31,<3", "numpy==1.26.4", "@types/node@20", "libc6:amd64", "g++", "x~=1.0", "a!=2"]
    environment = create(api, {"name": "e", "config": {"type": "cloud", "packages": {"pip": names}}})
    assert environment["config"]["packages"]["pip"] == names


def test_a_bad_package_name_in_an_update_changes_nothing(api):
    environment = create(api, {"name": "e", "config": {"type": "cloud", "packages": {"apt": ["curl"]}}})
    response = api.post(
        f"/v1/environments/{environment['id']}",
        {"config": {"type": "cloud", "packages": {"apt": ["curl && reboot"]}}},
        format="json",
    )
    assert_error(response, 400, "invalid_request_error", "apt")
    assert Environment.objects.get().config["packages"]["apt"] == ["curl"]


def test_metadata_merge(api):
    environment = create(api, {"name": "e", "metadata": {"a": "1", "b": "2"}})
    updated = api.post(
        f"/v1/environments/{environment['id']}", {"metadata": {"a": None, "c": "3"}}, format="json"
    ).json()
    assert updated["metadata"] == {"b": "2", "c": "3"}


def test_archive_and_delete(api):
    environment = create(api, {"name": "e"})
    archived = api.post(f"/v1/environments/{environment['id']}/archive").json()
    assert archived["archived_at"] is not None
    assert api.get("/v1/environments").json()["data"] == []
    deleted = api.delete(f"/v1/environments/{environment['id']}").json()
    assert deleted == {"id": environment["id"], "type": "environment_deleted"}
    assert_error(api.get(f"/v1/environments/{environment['id']}"), 404, "not_found_error")
