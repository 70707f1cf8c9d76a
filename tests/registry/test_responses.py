"""Every response serializer renders the fields it declares, no more and no fewer: the OpenAPI description
and the rendering are one class and cannot drift apart. Objects are built through the apps' services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework import serializers

from registry.agents import services as agents
from registry.agents.models import Agent
from registry.agents.serializers import AgentSerializer, AgentWriteSerializer
from registry.core.serialization import ResponseSerializer
from registry.core.uploads import UploadedPart
from registry.environments import services as environments
from registry.environments.models import Environment
from registry.environments.serializers import EnvironmentSerializer, EnvironmentWriteSerializer
from registry.extensions import services as extensions
from registry.extensions.models import Guardrail, ModelPrice
from registry.extensions.serializers import (
    GuardrailSerializer,
    GuardrailWriteSerializer,
    ModelPriceSerializer,
    ModelPriceWriteSerializer,
)
from registry.files import services as files
from registry.files.models import File
from registry.files.serializers import FileSerializer
from registry.gitcreds import services as gitcreds
from registry.gitcreds.models import GitCredential
from registry.gitcreds.serializers import GitCredentialSerializer, GitCredentialWriteSerializer
from registry.memory import selectors as memory_selectors
from registry.memory import services as memory
from registry.memory.models import Memory, MemoryStore, MemoryVersion
from registry.memory.serializers import (
    MemorySerializer,
    MemoryStoreSerializer,
    MemoryStoreWriteSerializer,
    MemoryVersionSerializer,
)
from registry.sessions import services as sessions
from registry.sessions import thread_log
from registry.sessions.models import Session, SessionEvent, SessionThread, primary_thread_id
from registry.sessions.serializers import (
    AppendedEventSerializer,
    EventSerializer,
    SessionCreateSerializer,
    SessionSerializer,
)
from registry.sessions.thread_serializers import SessionThreadSerializer
from registry.skills import selectors as skill_selectors
from registry.skills import services as skills
from registry.skills.bundles import parse_bundle
from registry.skills.models import Skill, SkillVersion
from registry.skills.serializers import SkillSerializer, SkillVersionSerializer
from registry.triggers import services as triggers
from registry.triggers.models import Trigger
from registry.triggers.serializers import TriggerSerializer, TriggerWriteSerializer
from registry.vaults import services as vaults
from registry.vaults.models import Vault, VaultCredential
from registry.vaults.serializers import CredentialSerializer, CredentialWriteSerializer, VaultSerializer
from registry.workspaces.models import Workspace

ACTOR = {"type": "api_actor", "api_key_id": "key_test"}
MANIFEST = b"---\nname: pdf-tools\ndescription: Fill PDF forms.\n---\n"


def validated(serializer: type[serializers.Serializer[Any]], data: dict[str, Any]) -> dict[str, Any]:
    body = serializer(data=data)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


def part(path: str, content: bytes) -> UploadedPart:
    uploaded = UploadedPart(path, content_type="text/plain", size=len(content), charset=None)
    uploaded.write(content)
    uploaded.seek(0)
    return uploaded


def agent(workspace: Workspace) -> Agent:
    values = validated(AgentWriteSerializer, {"name": "reviewer", "model": "claude-sonnet-4-5"})
    return agents.agent_create(workspace=workspace, values=values)


def environment(workspace: Workspace) -> Environment:
    return environments.environment_create(
        workspace=workspace, values=validated(EnvironmentWriteSerializer, {"name": "sandbox"})
    )


def session(workspace: Workspace) -> Session:
    body = {"agent": agent(workspace).id, "environment_id": environment(workspace).id}
    return sessions.session_create(workspace=workspace, values=validated(SessionCreateSerializer, body))


def appended_event(workspace: Workspace) -> SessionEvent:
    message = {"type": "user.message", "content": [{"type": "text", "text": "hello"}]}
    return sessions.events_append(session=session(workspace), events=[message])[0]


def child_thread(workspace: Workspace) -> SessionThread:
    parent = session(workspace)
    return thread_log.create(
        session_id=parent.pk,
        parent_thread_id=primary_thread_id(parent.pk),
        depth=1,
        agent_name="helper",
        agent={"type": "agent", "name": "helper"},
        max_threads=10,
        fence=None,
    )


def trigger(workspace: Workspace) -> Trigger:
    body = {
        "name": "nightly",
        "agent": agent(workspace).id,
        "source": {"type": "cron", "schedule": "*/5 * * * *", "payload": "Report."},
        "session": {"environment_id": environment(workspace).id},
    }
    return triggers.trigger_create(workspace=workspace, values=validated(TriggerWriteSerializer, body))


def vault(workspace: Workspace) -> Vault:
    return vaults.vault_create(workspace=workspace, values={"display_name": "ops"})


def credential(workspace: Workspace) -> VaultCredential:
    auth = {"type": "static_bearer", "token": "t", "mcp_server_url": "https://docs.example.com/mcp"}
    values = validated(CredentialWriteSerializer, {"auth": auth})
    return vaults.credential_create(vault=vault(workspace), values=values)


def memory_store(workspace: Workspace) -> MemoryStore:
    values = validated(MemoryStoreWriteSerializer, {"name": "notes"})
    return memory.memory_store_create(workspace=workspace, values=values)


def a_memory(workspace: Workspace) -> Memory:
    return memory.memory_create(store=memory_store(workspace), path="/a.md", content="remember", actor=ACTOR)


def memory_version(workspace: Workspace) -> MemoryVersion:
    return memory_selectors.memory_versions(store=a_memory(workspace).store).get()


def skill(workspace: Workspace) -> Skill:
    with part("pdf-tools/SKILL.md", MANIFEST) as manifest:  # closed as the API closes it (the storage moved it)
        return skills.skill_create(workspace=workspace, bundle=parse_bundle([manifest]), display_name=None)


def skill_version(workspace: Workspace) -> SkillVersion:
    return skill_selectors.skill_versions(skill=skill(workspace)).get()


def file(workspace: Workspace) -> File:
    with part("notes.txt", b"hello") as upload:
        return files.file_upload(workspace=workspace, part=upload, expires_in_seconds=None)


def git_credential(workspace: Workspace) -> GitCredential:
    values = validated(GitCredentialWriteSerializer, {"host": "github.com", "token": "t"})
    return gitcreds.git_credential_create(workspace=workspace, values=values)


def guardrail(workspace: Workspace) -> Guardrail:
    body = {"name": "no-secrets", "type": "blocked_terms", "config": {"terms": ["x"]}}
    return extensions.guardrail_create(values=validated(GuardrailWriteSerializer, body))


def model_price(workspace: Workspace) -> ModelPrice:
    body = {"provider": "p", "model": "m", "input_per_1m": "1", "output_per_1m": "2"}
    return extensions.model_price_create(values=validated(ModelPriceWriteSerializer, body))


Build = Callable[[Workspace], Any]
CASES: list[tuple[type[ResponseSerializer], Build, dict[str, Any]]] = [
    (AgentSerializer, agent, {}),
    (EnvironmentSerializer, environment, {}),
    (SessionSerializer, session, {}),
    (AppendedEventSerializer, appended_event, {}),
    (SessionThreadSerializer, session, {}),  # the primary thread
    (SessionThreadSerializer, child_thread, {}),
    (TriggerSerializer, trigger, {}),
    (VaultSerializer, vault, {}),
    (CredentialSerializer, credential, {}),
    (MemoryStoreSerializer, memory_store, {}),
    (MemorySerializer, a_memory, {"full": True}),
    (MemorySerializer, a_memory, {"full": False}),
    (MemoryVersionSerializer, memory_version, {"full": True}),
    (MemoryVersionSerializer, memory_version, {"full": False}),
    (SkillSerializer, skill, {}),
    (SkillVersionSerializer, skill_version, {}),
    (FileSerializer, file, {}),
    (GitCredentialSerializer, git_credential, {}),
    (GuardrailSerializer, guardrail, {}),
    (ModelPriceSerializer, model_price, {}),
]


@pytest.mark.parametrize(
    ("serializer", "build", "options"),
    CASES,
    ids=[f"{serializer.__name__}{options or ''}" for serializer, _, options in CASES],
)
def test_rendering_has_exactly_the_declared_fields(
    serializer: type[ResponseSerializer], build: Build, options: dict[str, Any], tenant: Any, uploads_dir: Any
) -> None:
    instance = build(tenant.workspace)

    rendered = serializer.render(instance, **options)

    assert sorted(rendered) == sorted(serializer().fields)
    assert sorted(serializer(instance, context=options).data) == sorted(rendered)


@pytest.mark.parametrize("native", [False, True])
def test_an_event_renders_its_declared_fields_and_its_type_s_own(tenant: Any, native: bool) -> None:
    event = appended_event(tenant.workspace)

    rendered = EventSerializer.render(event, native=native)

    assert set(EventSerializer().fields) <= set(rendered)
    assert rendered["content"] == [{"type": "text", "text": "hello"}]
    assert ("seq" in rendered) is native


def test_drf_entry_point_renders_what_render_renders(tenant: Any) -> None:
    made = agent(tenant.workspace)

    assert AgentSerializer(made).data == AgentSerializer.render(made)
