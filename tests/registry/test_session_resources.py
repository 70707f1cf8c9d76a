"""A live session's resources through the reference client: list, retrieve, add, rotate a token, delete."""

from __future__ import annotations

import anthropic
import pytest

from registry.core.secrets import unseal
from registry.sessions.models import Session
from tests.support.clients import registry_client
from tests.support.tenants import make_tenant

pytestmark = pytest.mark.django_db(transaction=True)


def client_for(live_server, name: str) -> anthropic.Anthropic:
    tenant = make_tenant(name)
    return registry_client(live_server.url, tenant.api_key)


@pytest.fixture
def uploads(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {**settings.STORAGES["default"], "OPTIONS": {"location": tmp_path}},
    }


@pytest.fixture
def sdk(live_server, uploads):
    return client_for(live_server, "resources")


def error_of(failure: anthropic.APIStatusError) -> dict:
    body = failure.body
    assert isinstance(body, dict)
    return body["error"]


def new_session(sdk, **fields):
    agent = sdk.beta.agents.create(name="a", model="claude-sonnet-4-5")
    environment = sdk.beta.environments.create(name="e")
    return sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id, **fields)


def test_add_list_retrieve_delete(sdk):
    store = sdk.beta.memory_stores.create(name="team/notes", description="what we learned")
    session = new_session(sdk, resources=[{"type": "memory_store", "memory_store_id": store.id}])
    uploaded = sdk.beta.files.upload(file=("a.txt", b"alpha", "text/plain"))

    added = sdk.beta.sessions.resources.add(session.id, type="file", file_id=uploaded.id, mount_path="/data/a.txt")
    assert added.type == "file" and added.mount_path == "/data/a.txt" and added.id.startswith("sesrsc_")
    listed = list(sdk.beta.sessions.resources.list(session.id))
    assert [item.type for item in listed] == ["memory_store", "file"]
    memory = listed[0]
    assert memory.mount_path == "/mnt/memory/team_notes" and memory.access == "read_write"
    assert memory.name == "team/notes" and memory.description == "what we learned"

    fetched = sdk.beta.sessions.resources.retrieve(added.id, session_id=session.id)
    assert fetched.file_id == uploaded.id
    deleted = sdk.beta.sessions.resources.delete(added.id, session_id=session.id)
    assert deleted.type == "session_resource_deleted" and deleted.id == added.id
    assert [item.type for item in sdk.beta.sessions.resources.list(session.id)] == ["memory_store"]
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.resources.retrieve(added.id, session_id=session.id)


def test_list_pages(sdk):
    uploaded = [sdk.beta.files.upload(file=(f"{n}.txt", b"x", "text/plain")) for n in range(3)]
    session = new_session(sdk, resources=[{"type": "file", "file_id": file.id} for file in uploaded])
    first = sdk.beta.sessions.resources.list(session.id, limit=2)
    assert [item.file_id for item in first.data] == [uploaded[0].id, uploaded[1].id]
    assert [item.file_id for item in first.get_next_page().data] == [uploaded[2].id]
    assert [item.file_id for item in sdk.beta.sessions.resources.list(session.id, limit=2)] == [f.id for f in uploaded]


def test_token_rotation_is_sealed_and_never_returned(sdk):
    session = new_session(
        sdk,
        resources=[{"type": "github_repository", "url": "https://git.example/acme/tool", "authorization_token": "t1"}],
    )
    (repository,) = session.resources
    rotated = sdk.beta.sessions.resources.update(repository.id, session_id=session.id, authorization_token="CANARY_2")
    assert rotated.id == repository.id and "CANARY_2" not in rotated.model_dump_json()
    stored = Session.objects.get(pk=session.id).resources[0]
    assert unseal(stored["sealed_authorization_token"], context=repository.id) == "CANARY_2"
    assert "CANARY_2" not in str(stored)


def test_bad_input_writes_nothing(sdk, live_server, uploads):
    uploaded = sdk.beta.files.upload(file=("a.txt", b"alpha", "text/plain"))
    session = new_session(sdk, resources=[{"type": "file", "file_id": uploaded.id}])
    other = client_for(live_server, "other")
    foreign = other.beta.files.upload(file=("b.txt", b"beta", "text/plain"))
    foreign_store = other.beta.memory_stores.create(name="theirs")

    attempts = [
        {"type": "file", "file_id": uploaded.id},  # the same default mount path again
        {"type": "file", "file_id": foreign.id},  # another workspace's file: as if missing
        {"type": "file", "file_id": "file_missing"},
        {"type": "file", "file_id": uploaded.id, "mount_path": "relative/path"},
    ]
    for body in attempts:
        with pytest.raises(anthropic.BadRequestError) as refused:
            sdk.post(f"/v1/sessions/{session.id}/resources", body=body, cast_to=object)
        assert error_of(refused.value)["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError) as foreign_refusal:
        sdk.post(
            f"/v1/sessions/{session.id}/resources",
            body={"type": "memory_store", "memory_store_id": foreign_store.id},
            cast_to=object,
        )
    with pytest.raises(anthropic.BadRequestError) as missing_refusal:
        sdk.post(
            f"/v1/sessions/{session.id}/resources",
            body={"type": "memory_store", "memory_store_id": "mems_missing"},
            cast_to=object,
        )
    foreign_message = error_of(foreign_refusal.value)["message"].replace(foreign_store.id, "ID")
    assert foreign_message == error_of(missing_refusal.value)["message"].replace("mems_missing", "ID")
    with pytest.raises(anthropic.BadRequestError):
        sdk.beta.sessions.resources.update(session.resources[0].id, session_id=session.id, authorization_token="x")
    assert len(Session.objects.get(pk=session.id).resources) == 1


def test_terminated_session_refuses_changes(sdk):
    uploaded = sdk.beta.files.upload(file=("a.txt", b"alpha", "text/plain"))
    session = new_session(sdk)
    sdk.beta.sessions.archive(session.id)
    with pytest.raises(anthropic.ConflictError):
        sdk.beta.sessions.resources.add(session.id, type="file", file_id=uploaded.id)
    with pytest.raises(anthropic.NotFoundError):
        sdk.beta.sessions.resources.list("sesn_missing")


def test_a_plain_http_repository_url_is_refused_saying_https_is_required(sdk):
    with pytest.raises(anthropic.BadRequestError) as refused:
        new_session(sdk, resources=[{"type": "github_repository", "url": "http://git.example/acme/tool"}])
    error = error_of(refused.value)
    assert error["type"] == "invalid_request_error"
    assert "https is required" in error["message"] and "resources" in error["message"], error
    assert "pattern" not in error["message"]
    assert Session.objects.count() == 0
