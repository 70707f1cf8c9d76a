"""Workspaces for tests: a workspace made through the services, its plaintext API key, and an API client that
sends it; and a session opened in one through the API."""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework.test import APIClient

from registry.workspaces import services
from registry.workspaces.models import Workspace


@dataclass(frozen=True)
class Tenant:
    """A workspace, its plaintext API key, and an API client that sends that key."""

    workspace: Workspace
    api_key: str
    client: APIClient


def make_tenant(name: str) -> Tenant:
    """A new workspace called `name` with a key (needs the database)."""
    workspace, issued = services.workspace_create(name=name)
    client = APIClient()
    client.credentials(HTTP_X_API_KEY=issued.plaintext)
    return Tenant(workspace=workspace, api_key=issued.plaintext, client=client)


def open_session(client: APIClient) -> str:
    """Through the API of `client`'s workspace: an agent `a` on model `m`, an environment `e`, and a session of
    both; the session's id."""
    agent = client.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = client.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    return str(client.post("/v1/sessions", body, format="json").json()["id"])
