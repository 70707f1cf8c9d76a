"""Environment keys and work secrets (issue 26, items 1 and 3): minted by `manage.py` and the `runtime` group's
API (shown once, stored as a digest), listed and revoked (refused at once); an environment key reaches only
its environment's sessions and the views that opt in, a work item's sessions token only its own session (and
that session's memory stores), everything else answers 401/403 in the error envelope; and scoped credentials
are refused by the default permission, so only the views listed here accept them."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

import anthropic
import pytest
from anthropic.lib.environments._worker import _sessions_token_from_secret
from django.core.management import CommandError, call_command
from django.urls import URLPattern, URLResolver, get_resolver, path
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.views import APIView

from registry.core.callers import ENVIRONMENT_KEY, WORK_SECRET, IsWorkspaceMember, scoped_access
from registry.environments import services as environment_services
from registry.environments.models import Environment
from registry.sessions import log
from registry.workspaces.models import EnvironmentKey, WorkSecret
from registry.workspaces.scoped_credentials import mint_work_secret, revoke_work_secrets
from registry.workspaces.services import digest_of
from settings.urls import urlpatterns as root_urlpatterns
from tests.support.api_errors import assert_error
from tests.support.tenants import Tenant, make_tenant

TEXT = [{"type": "text", "text": "x"}]
RUNTIME = "/apis/runtime.{domain}/v1"
TOOL_RESULT: Any = {"type": "user.tool_result", "tool_use_id": "toolu_1", "content": TEXT}
USER_MESSAGE: Any = {"type": "user.message", "content": TEXT}


# -- a tiny view that opts in, as the work queue's views do -----------------------------------------------------
class EnvironmentWorkProbe(APIView):
    """`GET /test-probe/environments/{id}/work`: open to environment keys of that environment."""

    accepts_scoped_credentials = (ENVIRONMENT_KEY, WORK_SECRET)

    def get(self, request, environment_id):
        if not scoped_access(request.user, environment_id=environment_id):
            return Response({"type": "error", "error": {"type": "permission_error", "message": "no"}}, status=403)
        return Response({"environment_id": environment_id})


class NotOptedIn(APIView):
    def get(self, request):
        return Response({"ok": True})


urlpatterns = [
    path("test-probe/environments/<str:environment_id>/work", EnvironmentWorkProbe.as_view()),
    path("test-probe/plain", NotOptedIn.as_view()),
    *root_urlpatterns,
]


@pytest.fixture
def probe_urls(settings):
    settings.ROOT_URLCONF = __name__


# -- fixtures ----------------------------------------------------------------------------------------------------
def sessions_token(secret: str) -> str:
    """The sessions token of a work item's `secret`, decoded as the reference client's worker does."""
    token = _sessions_token_from_secret(secret)
    assert token is not None
    return token


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def post(client: APIClient, url: str, body: dict) -> dict:
    response = client.post(url, body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def self_hosted_session(client: APIClient, environment_id: str, agent_id: str, **extra) -> str:
    body = {
        "agent": agent_id,
        "environment_id": environment_id,
        "harness": {"type": "agent_sdk_harness", "mode": "separate"},
        **extra,
    }
    return str(post(client, "/v1/sessions", body)["id"])


class World:
    """Workspace A with two self_hosted environments (a session in each) and a cloud one; workspace B with a
    self_hosted environment and a session."""

    def __init__(self, tenant: Tenant, other: Tenant) -> None:
        self.tenant, self.other = tenant, other
        api = tenant.client
        self.agent = post(api, "/v1/agents", {"name": "a", "model": "m"})["id"]
        self.env = post(api, "/v1/environments", {"name": "sh", "config": {"type": "self_hosted"}})["id"]
        self.env2 = post(api, "/v1/environments", {"name": "sh2", "config": {"type": "self_hosted"}})["id"]
        self.cloud = post(api, "/v1/environments", {"name": "c"})["id"]
        self.store = post(api, "/v1/memory_stores", {"name": "notes"})["id"]
        self.ro_store = post(api, "/v1/memory_stores", {"name": "docs"})["id"]
        self.loose_store = post(api, "/v1/memory_stores", {"name": "loose"})["id"]
        resources = [
            {"type": "memory_store", "memory_store_id": self.store},
            {"type": "memory_store", "memory_store_id": self.ro_store, "access": "read_only"},
        ]
        self.session = self_hosted_session(api, self.env, self.agent, resources=resources)
        self.sibling = self_hosted_session(api, self.env, self.agent)
        self.session2 = self_hosted_session(api, self.env2, self.agent)
        self.vault = post(api, "/v1/vaults", {"display_name": "v"})["id"]
        other_api = other.client
        other_agent = post(other_api, "/v1/agents", {"name": "a", "model": "m"})["id"]
        self.other_env = post(other_api, "/v1/environments", {"name": "sh", "config": {"type": "self_hosted"}})["id"]
        self.other_session = self_hosted_session(other_api, self.other_env, other_agent)

    def tool_result(self) -> dict[str, Any]:
        """A result for a built-in call the agent just made in `session` (the log refuses one for no call)."""
        call = log.emit(session_id=self.session, type="agent.tool_use", body={"name": "bash", "input": {}})
        return {**TOOL_RESULT, "tool_use_id": call.id}

    def key(self, environment_id: str | None = None) -> str:
        environment = Environment.objects.get(pk=environment_id or self.env)
        return environment_services.environment_key_mint(environment=environment).plaintext

    def secret(self, session_id: str | None = None, work_id: str = "work_test1") -> str:
        return mint_work_secret(work_id=work_id, session_id=session_id or self.session, environment_id=self.env)


def assert_sends_refused(client: APIClient, *, own: str, foreign: str) -> None:
    """A scoped credential sends no user message to its own session, and no tool result to one outside it."""
    message = {"type": "user.message", "content": TEXT}
    for session, event in ((own, message), (foreign, TOOL_RESULT)):
        sent = client.post(f"/v1/sessions/{session}/events", {"events": [event]}, format="json")
        assert_error(sent, 403, "permission_error")


@pytest.fixture
def world(db) -> World:
    return World(make_tenant("a"), make_tenant("b"))


@pytest.fixture
def runtime(settings) -> str:
    """The runtime group, served (a deployment may not serve it)."""
    settings.REGISTRY_EXTENSION_GROUPS = [*settings.REGISTRY_EXTENSION_GROUPS, "runtime"]
    return RUNTIME.format(domain=settings.REGISTRY_EXTENSION_DOMAIN)


# -- minting: manage.py ------------------------------------------------------------------------------------------
def command(*args: str) -> dict:
    out = io.StringIO()
    call_command("environment_key", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_manage_py_mints_once_stores_a_digest_lists_and_revokes(world):
    minted = command("mint", world.env, "--name", "ci")
    plaintext = minted["key"]
    assert plaintext.startswith("sk-env-") and minted["environment_id"] == world.env
    row = EnvironmentKey.objects.get(pk=minted["id"])
    assert row.digest == digest_of(plaintext) and row.name == "ci" and row.workspace_id == world.tenant.workspace.pk
    assert plaintext not in {str(value) for value in row.__dict__.values()}  # only the digest is kept

    listed = command("list", "--environment", world.env)["data"]
    assert [item["id"] for item in listed] == [row.id]
    assert "key" not in listed[0] and plaintext not in json.dumps(listed)

    client = bearer(plaintext)
    assert client.get(f"/v1/sessions/{world.session}").status_code == 200
    assert command("revoke", row.id)["revoked_at"] is not None
    assert_error(client.get(f"/v1/sessions/{world.session}"), 401, "authentication_error", "revoked")
    assert command("list", "--environment", world.env)["data"] == []
    assert [item["id"] for item in command("list", "--include-revoked")["data"]] == [row.id]


def test_manage_py_refuses_a_cloud_or_missing_environment(world):
    with pytest.raises(CommandError, match="not self_hosted"):
        command("mint", world.cloud)
    with pytest.raises(CommandError, match="no environment"):
        command("mint", "env_missing00000000000000")
    assert not EnvironmentKey.objects.exists()


# -- minting: the runtime group's API ---------------------------------------------------------------------------
def test_runtime_api_mints_once_lists_and_revokes(world, runtime):
    api = world.tenant.client
    keys = f"{runtime}/environments/{world.env}/keys"
    minted = post(api, keys, {"name": "worker"})
    assert minted["type"] == "environment_key" and minted["key"].startswith("sk-env-")
    assert minted["display_prefix"] == minted["key"][:12] and minted["revoked_at"] is None
    assert EnvironmentKey.objects.get(pk=minted["id"]).digest == digest_of(minted["key"])

    listed = api.get(keys).json()
    assert [item["id"] for item in listed["data"]] == [minted["id"]] and "key" not in listed["data"][0]
    fetched = api.get(f"{keys}/{minted['id']}").json()
    assert fetched["id"] == minted["id"] and "key" not in fetched

    scoped = bearer(minted["key"])
    assert scoped.get(f"/v1/sessions/{world.session}").status_code == 200
    assert_error(scoped.get(keys), 403, "permission_error")  # a key does not manage keys
    assert_error(scoped.post(keys, {}, format="json"), 403, "permission_error")

    revoked = post(api, f"{keys}/{minted['id']}/revoke", {})
    assert revoked["revoked_at"] is not None
    assert_error(scoped.get(f"/v1/sessions/{world.session}"), 401, "authentication_error")
    assert api.get(keys).json()["data"] == []
    assert [item["id"] for item in api.get(keys, {"include_revoked": "true"}).json()["data"]] == [minted["id"]]


def test_runtime_api_refuses_cloud_and_foreign_environments(world, runtime):
    api = world.tenant.client
    assert_error(
        api.post(f"{runtime}/environments/{world.cloud}/keys", {}, format="json"), 400, "invalid_request_error"
    )
    assert_error(api.get(f"{runtime}/environments/{world.other_env}/keys"), 404, "not_found_error")
    assert_error(api.post(f"{runtime}/environments/{world.other_env}/keys", {}, format="json"), 404, "not_found_error")


# -- what an environment key reaches ----------------------------------------------------------------------------
def test_environment_key_acts_on_its_environments_sessions(world):
    client = bearer(world.key())
    for session in (world.session, world.sibling):
        assert client.get(f"/v1/sessions/{session}").json()["id"] == session
        assert client.get(f"/v1/sessions/{session}/events", {"limit": 1000}).status_code == 200
    sent = client.post(f"/v1/sessions/{world.session}/events", {"events": [world.tool_result()]}, format="json")
    assert sent.status_code == 200, sent.content
    assert sent.json()["data"][0]["type"] == "user.tool_result"


def test_environment_key_is_refused_everywhere_else(world, runtime):
    client = bearer(world.key())
    refused = [
        "/v1/agents",
        f"/v1/agents/{world.agent}",
        "/v1/vaults",
        f"/v1/vaults/{world.vault}",
        "/v1/environments",
        f"/v1/environments/{world.env}",
        "/v1/sessions",
        f"/v1/sessions/{world.session}/resources",
        f"/v1/sessions/{world.session}/outcome",
        f"/v1/sessions/{world.session2}",  # another environment
        f"/v1/sessions/{world.session2}/events",
        f"/v1/sessions/{world.other_session}",  # another workspace
        f"/v1/sessions/{world.other_session}/events",
        "/v1/sessions/sesn_missing000000000000",
        f"/v1/memory_stores/{world.store}/memories",  # the memory endpoints reject the environment key
        "/v1/memory_stores",
        "/v1/files",
        "/v1/skills",
        "/v1/triggers",
        f"{runtime}/harnesses",
        "/api",
        "/apis",
    ]
    for url in refused:
        assert_error(client.get(url), 403, "permission_error")
    assert_sends_refused(client, own=world.session, foreign=world.session2)
    assert_error(client.post("/v1/agents", {"name": "x", "model": "m"}, format="json"), 403, "permission_error")
    assert_error(client.post(f"/v1/sessions/{world.session}/archive", {}, format="json"), 403, "permission_error")
    assert_error(client.delete(f"/v1/sessions/{world.session}"), 403, "permission_error")


def test_opted_in_view_takes_the_key_of_its_environment_only(world, probe_urls):
    key = world.key()
    client = bearer(key)
    assert client.get(f"/test-probe/environments/{world.env}/work").json() == {"environment_id": world.env}
    for environment in (world.env2, world.other_env):
        assert client.get(f"/test-probe/environments/{environment}/work").status_code == 403
    assert_error(client.get("/test-probe/plain"), 403, "permission_error")  # no opt-in: refused by default
    assert world.tenant.client.get("/test-probe/plain").json() == {"ok": True}  # a workspace key is not
    assert world.tenant.client.get(f"/test-probe/environments/{world.env}/work").status_code == 200
    foreign = bearer(world.key(world.env2))
    assert foreign.get(f"/test-probe/environments/{world.env}/work").status_code == 403


def test_unknown_scoped_tokens_are_refused_before_oidc(db, settings):
    settings.OIDC_OP_USER_ENDPOINT = "http://127.0.0.1:9/never-called"
    for token in ("sk-env-unknown", "sk-wst-unknown"):
        response = bearer(token).get("/v1/agents")
        assert_error(response, 401, "authentication_error")
        assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_reference_client_with_an_environment_key(world, live_server):
    key = world.key()
    sdk = anthropic.Anthropic(base_url=live_server.url, api_key=None, auth_token=key, max_retries=0)
    assert sdk.beta.sessions.retrieve(world.session).id == world.session
    sdk.beta.sessions.events.send(world.session, events=[world.tool_result()])
    log.emit(session_id=world.session, type="agent.message", body={"content": TEXT})
    listed = [event.type for event in sdk.beta.sessions.events.list(world.session, limit=1000)]
    assert listed == ["agent.tool_use", "agent.message"]
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.agents.list()
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.vaults.list()
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.environments.retrieve(world.env)
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.sessions.retrieve(world.session2)
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.sessions.retrieve(world.other_session)
    EnvironmentKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    with pytest.raises(anthropic.AuthenticationError):
        sdk.beta.sessions.retrieve(world.session)


# -- work secrets -----------------------------------------------------------------------------------------------
def test_work_secret_is_what_the_reference_worker_decodes(world):
    secret = world.secret()
    token = _sessions_token_from_secret(secret)
    assert token is not None and token.startswith("sk-wst-")
    row = WorkSecret.objects.get()
    assert row.digest == digest_of(token) and row.session_id == world.session and row.work_id == "work_test1"
    assert row.workspace_id == world.tenant.workspace.pk
    assert token not in secret and "=" not in secret  # base64url JSON, unpadded, as the worker expects


def test_work_secret_reaches_its_session_and_nothing_else(world, probe_urls, runtime):
    client = bearer(sessions_token(world.secret()))
    assert client.get(f"/v1/sessions/{world.session}").json()["id"] == world.session
    assert client.get(f"/v1/sessions/{world.session}/events", {"limit": 1000}).status_code == 200
    sent = client.post(f"/v1/sessions/{world.session}/events", {"events": [world.tool_result()]}, format="json")
    assert sent.status_code == 200, sent.content

    refused = [
        f"/v1/sessions/{world.sibling}",  # same environment, another session
        f"/v1/sessions/{world.sibling}/events",
        f"/v1/sessions/{world.session2}",
        f"/v1/sessions/{world.other_session}",
        f"/v1/sessions/{world.session}/resources",
        "/v1/sessions",
        "/v1/agents",
        f"/v1/agents/{world.agent}",
        "/v1/vaults",
        f"/v1/environments/{world.env}",
        f"/v1/memory_stores/{world.store}",
        f"/v1/memory_stores/{world.loose_store}/memories",  # not attached to the session
        f"/v1/memory_stores/{world.store}/memory_versions",
        f"/test-probe/environments/{world.env}/work",  # environment-wide work is the key's
        f"{runtime}/environments/{world.env}/keys",
    ]
    for url in refused:
        assert client.get(url).status_code == 403, url
    assert_sends_refused(client, own=world.session, foreign=world.sibling)


def test_work_secret_reads_and_writes_its_sessions_memory_stores(world):
    client = bearer(sessions_token(world.secret()))
    created = post(client, f"/v1/memory_stores/{world.store}/memories", {"path": "/a.md", "content": "hi"})
    assert created["path"] == "/a.md"
    listed = client.get(f"/v1/memory_stores/{world.store}/memories").json()["data"]
    assert [item["path"] for item in listed] == ["/a.md"]
    assert client.get(f"/v1/memory_stores/{world.store}/memories/{created['id']}").json()["content"] == "hi"
    assert client.get(f"/v1/memory_stores/{world.ro_store}/memories").status_code == 200
    refused = client.post(
        f"/v1/memory_stores/{world.ro_store}/memories", {"path": "/b.md", "content": "x"}, format="json"
    )
    assert_error(refused, 403, "permission_error", "read-only")


def test_a_stopped_items_secret_is_refused(world):
    token = sessions_token(world.secret())
    other_item = sessions_token(world.secret(world.sibling, work_id="work_test2"))
    client = bearer(token)
    assert client.get(f"/v1/sessions/{world.session}").status_code == 200
    revoke_work_secrets("work_test1")
    assert_error(client.get(f"/v1/sessions/{world.session}"), 401, "authentication_error")
    assert bearer(other_item).get(f"/v1/sessions/{world.sibling}").status_code == 200


def test_reference_client_with_a_work_secret(world, live_server):
    token = sessions_token(world.secret())
    sdk = anthropic.Anthropic(base_url=live_server.url, api_key=None, auth_token=token, max_retries=0)
    assert sdk.beta.sessions.retrieve(world.session).id == world.session
    sdk.beta.sessions.events.send(world.session, events=[world.tool_result()])
    log.emit(session_id=world.session, type="agent.message", body={"content": TEXT})
    listed = [event.type for event in sdk.beta.sessions.events.list(world.session, limit=1000)]
    assert listed == ["agent.tool_use", "agent.message"]
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.sessions.retrieve(world.sibling)
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.agents.retrieve(world.agent)
    with pytest.raises(anthropic.PermissionDeniedError):
        sdk.beta.sessions.events.send(world.session, events=[USER_MESSAGE])
    revoke_work_secrets("work_test1")
    with pytest.raises(anthropic.AuthenticationError):
        sdk.beta.sessions.retrieve(world.session)


# -- the default: refused unless a view opts in -----------------------------------------------------------------
def principal_of(client: APIClient, url: str) -> Any:
    """The principal the API authenticated a request of `client` as."""
    return client.get(url).wsgi_request.user


def test_default_permission_refuses_scoped_callers_unless_the_view_opts_in(world):
    allow = IsWorkspaceMember().has_permission
    principal = principal_of(bearer(world.key()), f"/v1/sessions/{world.session}")
    assert principal.credential_kind == ENVIRONMENT_KEY and principal.environment_id == world.env
    request: Any = SimpleNamespace(user=principal)
    assert allow(request, SimpleNamespace()) is False
    opted: Any = SimpleNamespace(accepts_scoped_credentials=(ENVIRONMENT_KEY,))
    assert allow(request, opted) is True
    opted.scoped_actions, opted.action = frozenset({"retrieve"}), "list"
    assert allow(request, opted) is False
    workspace = principal_of(world.tenant.client, "/v1/agents")
    assert allow(SimpleNamespace(user=workspace), SimpleNamespace()) is True  # type: ignore[arg-type]
    assert scoped_access(workspace) is True and scoped_access(principal) is False


def views_of(patterns, found=None):
    found = [] if found is None else found
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            views_of(pattern.url_patterns, found)
        elif isinstance(pattern, URLPattern):
            view = getattr(pattern.callback, "cls", None) or getattr(pattern.callback, "view_class", None)
            if view is not None:
                found.append(view)
    return found


# The views scoped credentials reach (the work queue's views join this list when they opt in).
OPTED_IN = {
    "SessionViewSet": (ENVIRONMENT_KEY, WORK_SECRET),
    "SessionEventViewSet": (ENVIRONMENT_KEY, WORK_SECRET),
    "SessionThreadViewSet": (ENVIRONMENT_KEY, WORK_SECRET),  # to read them (list, retrieve), not to archive
    "SessionThreadEventViewSet": (ENVIRONMENT_KEY, WORK_SECRET),
    "SkillVersionViewSet": (WORK_SECRET,),
    "MemoryViewSet": (WORK_SECRET,),
}
WORK_QUEUE_VIEWS = ("Work",)  # names of the queue's views (issue 26 item 2), checked by its own tests


def test_only_the_listed_views_opt_in(db):
    opted = {
        view.__name__: tuple(view.accepts_scoped_credentials)
        for view in views_of(get_resolver().url_patterns)
        if getattr(view, "accepts_scoped_credentials", ())
        and not any(part in view.__name__ for part in WORK_QUEUE_VIEWS)
    }
    assert opted == OPTED_IN


# -- the agent's skills, and the event stream -------------------------------------------------------------------
def test_work_secret_reads_the_skills_of_its_sessions_agent(world, uploads_dir):
    from tests.registry.test_skills import create_skill

    api = world.tenant.client
    skill, other_skill = create_skill(api), create_skill(api)
    agent = post(
        api, "/v1/agents", {"name": "s", "model": "m", "skills": [{"type": "custom", "skill_id": skill["id"]}]}
    )
    session = self_hosted_session(api, world.env, agent["id"])
    client = bearer(sessions_token(world.secret(session, work_id="work_skills")))
    version = skill["latest_version_id"]
    assert client.get(f"/v1/skills/{skill['id']}/versions/{version}").json()["id"] == version
    content: Any = client.get(f"/v1/skills/{skill['id']}/versions/{version}/content", HTTP_ACCEPT="application/binary")
    assert content.status_code == 200 and content["Content-Type"] == "application/zip"
    assert b"".join(content.streaming_content).startswith(b"PK")
    for close in content._resource_closers:  # the archive's spooled file (`close()` would end the request)
        close()
    for url in (
        f"/v1/skills/{other_skill['id']}/versions/{other_skill['latest_version_id']}",
        f"/v1/skills/{skill['id']}",
        f"/v1/skills/{skill['id']}/versions",
    ):
        assert_error(client.get(url), 403, "permission_error")
    assert_error(client.delete(f"/v1/skills/{skill['id']}/versions/{version}"), 403, "permission_error")
    key = bearer(world.key())  # the environment key reads no skills
    assert_error(key.get(f"/v1/skills/{skill['id']}/versions/{version}"), 403, "permission_error")


def test_the_stream_follows_the_same_scope(world):
    from registry.sessions.consumers import StreamRefused, find_session

    url = f"/v1/sessions/{world.session}"
    key, secret = principal_of(bearer(world.key()), url), principal_of(bearer(sessions_token(world.secret())), url)
    assert find_session(key, world.sibling).id == world.sibling
    assert find_session(secret, world.session).id == world.session
    for principal, session in ((key, world.session2), (secret, world.sibling), (key, "sesn_missing000000000000")):
        with pytest.raises(StreamRefused) as refused:
            find_session(principal, session)
        assert refused.value.status == 403
