"""Workspace staff in admin tests: staff users holding roles in workspaces, logged in with Django's test client;
one object of every kind the admin shows, made in a workspace through the API (`holdings`); and the values an
admin page's form would post back (`form_values`)."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from django.contrib.auth.models import User
from django.test import Client, override_settings

from registry.agents.models import AgentVersion
from registry.environments import services as environment_services
from registry.environments.models import Environment
from registry.sessions.models import WorkItem
from registry.skills.models import SkillVersion
from registry.vaults.models import VaultCredential
from registry.webhooks import outbox
from registry.webhooks.models import WebhookDelivery
from registry.workspaces import services as workspace_services
from registry.workspaces.models import ApiKey, StaffMembership, Workspace
from tests.support.admin_turns import STAFF_PASSWORD, create_finished_turn
from tests.support.tenants import Tenant
from tests.support.uploads import multipart

SKILL_MANIFEST = b"---\nname: pdf-tools\ndescription: Fill and read PDF forms.\n---\n\n# PDF tools\n"


def staff_client(name: str, roles: dict[Workspace, str] | None = None, *, superuser: bool = False) -> Client:
    """A staff user holding these roles (or a superuser), logged in."""
    if superuser:
        user = User.objects.create_superuser(name, f"{name}@example.com", STAFF_PASSWORD)
    else:
        user = User.objects.create_user(name, password=STAFF_PASSWORD, is_staff=True)
    for workspace, role in (roles or {}).items():
        StaffMembership.objects.create(user=user, workspace=workspace, role=role)
    client = Client()
    assert client.login(username=name, password=STAFF_PASSWORD)
    return client


def _created(tenant: Tenant, path: str, body: dict[str, Any]) -> str:
    response = tenant.client.post(path, body, format="json")
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def _self_hosted(tenant: Tenant, agent_id: str) -> tuple[str, str]:
    """A key of a self_hosted environment of the tenant's, and the work item of a session on it (issue 26)."""
    environment_id = _created(tenant, "/v1/environments", {"name": "workers", "config": {"type": "self_hosted"}})
    environment = Environment.objects.get(pk=environment_id)
    key = environment_services.environment_key_mint(environment=environment, name="worker").environment_key.pk
    session_id = _created(tenant, "/v1/sessions", {"agent": agent_id, "environment_id": environment_id})
    return key, WorkItem.objects.get(session_ref=session_id).pk


def _uploaded(tenant: Tenant, path: str, parts: list[tuple[str, str | None, str | None, bytes]]) -> str:
    body, content_type = multipart(parts)
    response = tenant.client.generic("POST", path, body, content_type=content_type)  # type: ignore[arg-type]
    assert response.status_code == 200, response.content
    return str(response.json()["id"])


def _trigger(tenant: Tenant, agent_id: str, environment_id: str) -> str:
    source = {"type": "cron", "schedule": "*/5 * * * *", "timezone": "UTC", "payload": "Report."}
    body = {"name": "nightly", "agent": agent_id, "source": source, "session": {"environment_id": environment_id}}
    return _created(tenant, "/v1/triggers", body)


def _deployment_run(tenant: Tenant, agent_id: str, environment_id: str) -> tuple[str, str]:
    """A deployment of the agent and its run made at once (issue 28)."""
    go = [{"type": "user.message", "content": [{"type": "text", "text": "Report."}]}]
    body = {"name": "daily", "agent": agent_id, "environment_id": environment_id, "initial_events": go}
    deployment = _created(tenant, "/v1/deployments", body)
    return deployment, _created(tenant, f"/v1/deployments/{deployment}/run", {})


def _webhook_delivery(tenant: Tenant) -> tuple[str, str, str]:
    """An endpoint (on a loopback URL the test allows), an event of the workspace and its delivery (issue 28)."""
    with override_settings(REGISTRY_EGRESS_ALLOW="127.0.0.1"):
        body = {"url": "http://127.0.0.1:9/hooks", "enabled_events": ["agent.created"]}
        endpoint = _created(tenant, "/v1/webhooks", body)
    event = outbox.emit("agent.created", workspace_id=tenant.workspace.pk, object_id="agent_of_the_admin_test")
    delivery = WebhookDelivery.objects.create(endpoint_id=endpoint, event=event)
    return endpoint, delivery.pk, str(event.pk)


def holdings(tenant: Tenant) -> dict[str, str]:
    """One object of every kind in the tenant's workspace, made through the API (a session with a finished
    turn, its agent, environment and vault with a credential; a memory store, a git credential, a file, a skill,
    a trigger, a deployment and its run, a webhook endpoint with an event and its delivery; the workspace's key,
    an OIDC membership, a self_hosted environment's key and a work item), by the admin list that shows it:
    {list URL: key}. Uploads need the default storage pointed at a test directory."""
    turn = create_finished_turn(tenant)
    skill = _uploaded(tenant, "/v1/skills", [("files[]", "pdf-tools/SKILL.md", "text/markdown", SKILL_MANIFEST)])
    subject = f"subject-of-{tenant.workspace.pk}"
    environment_key, work_item = _self_hosted(tenant, turn.agent_id)
    deployment, deployment_run = _deployment_run(tenant, turn.agent_id, turn.environment_id)
    endpoint, delivery, event = _webhook_delivery(tenant)
    return {
        "/admin/workspaces/workspace/": tenant.workspace.pk,
        "/admin/workspaces/apikey/": str(ApiKey.objects.get(workspace=tenant.workspace).pk),
        "/admin/workspaces/environmentkey/": environment_key,
        "/admin/workspaces/oidcmembership/": str(
            workspace_services.membership_set(workspace=tenant.workspace, subject=subject).pk
        ),
        "/admin/agents/agent/": turn.agent_id,
        "/admin/agents/agentversion/": str(AgentVersion.objects.get(agent_id=turn.agent_id).pk),
        "/admin/environments/environment/": turn.environment_id,
        "/admin/vaults/vault/": turn.vault_id,
        "/admin/vaults/vaultcredential/": VaultCredential.objects.get(vault_id=turn.vault_id).pk,
        "/admin/agent_sessions/session/": turn.session_id,
        "/admin/agent_sessions/workitem/": work_item,
        "/admin/memory/memorystore/": _created(tenant, "/v1/memory_stores", {"name": "notes"}),
        "/admin/gitcreds/gitcredential/": _created(tenant, "/v1/git-creds", {"host": "github.com", "token": "t0ken"}),
        "/admin/files/file/": _uploaded(tenant, "/v1/files", [("file", "report.txt", "text/plain", b"hello")]),
        "/admin/skills/skill/": skill,
        "/admin/skills/skillversion/": str(SkillVersion.objects.get(skill_id=skill).pk),
        "/admin/triggers/trigger/": _trigger(tenant, turn.agent_id, turn.environment_id),
        "/admin/deployments/deployment/": deployment,
        "/admin/deployments/deploymentrun/": deployment_run,
        "/admin/webhooks/webhookendpoint/": endpoint,
        "/admin/webhooks/webhookdelivery/": delivery,
        "/admin/webhooks/webhookevent/": event,
    }


class _FormReader(HTMLParser):
    """What a browser would submit from an admin page's own form (`<form id="…_form">`): inputs, checked boxes,
    textareas and selected options (submit buttons and read-only fields send nothing)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, Any] = {}
        self.in_form = False
        self.textarea: str | None = None
        self.select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.in_form = found.get("id", "").endswith("_form")
        elif not self.in_form or ("name" not in found and tag != "option"):
            return
        elif tag == "input" and found.get("type") not in ("submit", "button", "file", "reset", "image"):
            if found.get("type") not in ("checkbox", "radio") or "checked" in found:
                self.values[found["name"]] = found.get("value", "")
        elif tag == "textarea":
            self.textarea = found["name"]
            self.values[self.textarea] = ""
        elif tag == "select":
            self.select = found["name"]
        elif tag == "option" and self.select and "selected" in found:
            self.values[self.select] = found.get("value", "")

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.values[self.textarea] += data.removeprefix("\n") if not self.values[self.textarea] else data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.in_form = False
        elif tag == "textarea":
            self.textarea = None
        elif tag == "select":
            self.select = None


def form_values(client: Client, url: str) -> dict[str, Any]:
    """The values the admin page at `url` would post back unchanged."""
    response = client.get(url)
    assert response.status_code == 200, url
    reader = _FormReader()
    reader.feed(response.content.decode())
    return reader.values
