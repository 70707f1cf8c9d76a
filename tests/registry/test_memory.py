"""Memory stores: path rules, views, preconditions, versions and redaction, the race, the reference client."""

from __future__ import annotations

import hashlib
import threading
import unicodedata

import anthropic
import httpx
import pytest

from registry.memory.models import Memory, MemoryVersion
from tests.support.api_errors import assert_error, assert_not_found
from tests.support.clients import registry_client
from tests.support.tenants import make_tenant


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def store(api):
    return api.post("/v1/memory_stores", {"name": "Notes", "description": "team notes"}, format="json").json()


def memories(store):
    return f"/v1/memory_stores/{store['id']}/memories"


def put(api, store, path, content):
    response = api.post(memories(store), {"path": path, "content": content}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_store_crud(api, store):
    assert store["id"].startswith("mems_") and store["type"] == "memory_store"
    updated = api.post(f"/v1/memory_stores/{store['id']}", {"metadata": {"a": "1"}, "name": "N2"}, format="json")
    assert updated.json()["name"] == "N2" and updated.json()["metadata"] == {"a": "1"}
    assert [item["id"] for item in api.get("/v1/memory_stores").json()["data"]] == [store["id"]]
    archived = api.post(f"/v1/memory_stores/{store['id']}/archive").json()
    assert archived["archived_at"]
    assert_error(
        api.post(memories(store), {"path": "/a", "content": "x"}, format="json"),
        400,
        "invalid_request_error",
        "archived",
    )
    assert api.delete(f"/v1/memory_stores/{store['id']}").json() == {"id": store["id"], "type": "memory_store_deleted"}


def test_create_retrieve_views_and_hash(api, store):
    created = put(api, store, "/projects/é.md", "hello")
    assert created["id"].startswith("mem_") and created["memory_version_id"].startswith("memver_")
    assert created["content"] is None  # create answers the basic view by default
    assert created["content_sha256"] == sha("hello") and created["content_size_bytes"] == 5
    full = api.get(f"{memories(store)}/{created['id']}").json()
    assert full["content"] == "hello"
    assert api.get(f"{memories(store)}/{created['id']}", {"view": "basic"}).json()["content"] is None
    assert_error(
        api.post(memories(store), {"path": "/projects/é.md", "content": "again"}, format="json"),
        409,
        "conflict_error",
        "path",
    )


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("relative.md", "start"),
        ("/a//b", "empty"),
        ("/a/../b", "'..'"),
        ("/a/./b", "'.'"),
        ("/trailing/", "empty"),
        ("/" + "x" * 1025, "1024 bytes"),
        ("/" + "/".join(["s"] * 21), "segments"),
        ("/bad\u0007bell", "control"),
        ("/line\u2028sep", "control"),
        ("/" + unicodedata.normalize("NFD", "é"), "Normalization"),
    ],
)
def test_path_rules(api, store, path, why):
    assert_error(
        api.post(memories(store), {"path": path, "content": "x"}, format="json"), 400, "invalid_request_error", why
    )
    assert Memory.objects.count() == 0


def test_content_limit(api, store):
    assert_error(
        api.post(memories(store), {"path": "/big", "content": "é" * 51_201}, format="json"),
        400,
        "invalid_request_error",
        "102400",
    )
    assert put(api, store, "/max", "x" * 102_400)["content_size_bytes"] == 102_400


def test_update_with_precondition(api, store):
    memory = put(api, store, "/todo", "v1")
    url = f"{memories(store)}/{memory['id']}"
    precondition = {"type": "content_sha256", "content_sha256": sha("v1")}
    updated = api.post(url, {"content": "v2", "precondition": precondition, "view": "full"}, format="json").json()
    assert updated["content"] == "v2" and updated["memory_version_id"] != memory["memory_version_id"]
    stale = api.post(url, {"content": "v3", "precondition": precondition}, format="json")
    assert_error(stale, 409, "memory_precondition_failed_error")
    same = api.post(url, {"content": "v2", "precondition": precondition}, format="json")  # already the state asked
    assert same.status_code == 200 and same.json()["memory_version_id"] == updated["memory_version_id"]
    renamed = api.post(url, {"path": "/done"}, format="json").json()
    assert renamed["path"] == "/done" and renamed["id"] == memory["id"]
    assert_error(
        api.post(url, {"precondition": {"type": "content_sha256", "content_sha256": "ABC"}}, format="json"),
        400,
        "invalid_request_error",
        "content_sha256",
    )


def test_delete_with_expected_hash(api, store):
    memory = put(api, store, "/gone", "bye")
    url = f"{memories(store)}/{memory['id']}"
    assert_error(api.delete(f"{url}?expected_content_sha256={sha('other')}"), 409, "memory_precondition_failed_error")
    assert api.delete(f"{url}?expected_content_sha256={sha('bye')}").json() == {
        "id": memory["id"],
        "type": "memory_deleted",
    }
    assert_error(api.get(url), 404, "not_found_error")
    operations = [
        v["operation"]
        for v in api.get(
            f"/v1/memory_stores/{store['id']}/memory_versions", {"memory_id": memory["id"], "order": "asc"}
        ).json()["data"]
    ]
    assert operations == ["created", "deleted"]


def test_list_prefix_depth_and_pages(api, store):
    for path in ("/a.md", "/notes/one.md", "/notes/two.md", "/notes/deep/three.md", "/notes-archive/x.md"):
        put(api, store, path, path)
    under = api.get(memories(store), {"path_prefix": "/notes/"}).json()["data"]
    assert [item["path"] for item in under] == ["/notes/deep/three.md", "/notes/one.md", "/notes/two.md"]
    shallow = api.get(memories(store), {"path_prefix": "/notes/", "depth": 1}).json()["data"]
    assert [(item["type"], item["path"]) for item in shallow] == [
        ("memory_prefix", "/notes/deep/"),
        ("memory", "/notes/one.md"),
        ("memory", "/notes/two.md"),
    ]
    top = api.get(memories(store), {"depth": 1}).json()["data"]
    assert [item["path"] for item in top] == ["/a.md", "/notes-archive/", "/notes/"]
    seen, page = [], None
    while True:
        body = api.get(memories(store), {"limit": 2, **({"page": page} if page else {})}).json()
        seen += [item["path"] for item in body["data"]]
        page = body["next_page"]
        if not page:
            break
    assert len(seen) == 5 and seen == sorted(seen)
    assert_error(api.get(memories(store), {"path_prefix": "/notes"}), 400, "invalid_request_error", "path_prefix")
    assert_error(api.get(memories(store), {"view": "full", "limit": 50}), 400, "invalid_request_error", "limit")
    assert all(
        item["content"]
        for item in api.get(memories(store), {"view": "full"}).json()["data"]
        if item["type"] == "memory"
    )


def test_versions_and_redaction(api, store):
    memory = put(api, store, "/secret", "password=hunter2")
    api.post(f"{memories(store)}/{memory['id']}", {"content": "nothing here"}, format="json")
    versions_url = f"/v1/memory_stores/{store['id']}/memory_versions"
    old, current = api.get(versions_url, {"order": "asc", "view": "full"}).json()["data"]
    assert old["content"] == "password=hunter2" and old["created_by"]["type"] == "api_actor"
    assert_error(api.post(f"{versions_url}/{current['id']}/redact"), 409, "conflict_error")
    redacted = api.post(f"{versions_url}/{old['id']}/redact").json()
    assert redacted["content"] is None and redacted["path"] is None and redacted["content_sha256"] is None
    assert redacted["redacted_at"] and redacted["redacted_by"]["type"] == "api_actor"
    assert "hunter2" not in str(list(MemoryVersion.objects.values()))


def test_other_workspace_sees_nothing(api, store, other_tenant):
    memory = put(api, store, "/mine", "x")
    other = other_tenant.client
    assert_not_found(
        other,
        f"/v1/memory_stores/{store['id']}",
        memories(store),
        f"{memories(store)}/{memory['id']}",
        f"/v1/memory_stores/{store['id']}/memory_versions",
    )
    assert_error(
        other.post(f"{memories(store)}/{memory['id']}", {"content": "y"}, format="json"), 404, "not_found_error"
    )
    assert_error(other.delete(f"{memories(store)}/{memory['id']}"), 404, "not_found_error")
    assert other.get("/v1/memory_stores", {"include_archived": "true"}).json()["data"] == []


@pytest.mark.django_db(transaction=True)
def test_racing_writers_with_one_precondition_exactly_one_wins(live_server):
    tenant = make_tenant("race")
    headers = {"x-api-key": tenant.api_key}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as client:
        store = client.post("/v1/memory_stores", json={"name": "race"}).json()
        memory = client.post(f"/v1/memory_stores/{store['id']}/memories", json={"path": "/n", "content": "0"}).json()
    barrier = threading.Barrier(8)
    statuses: list[int] = []

    def write(index: int) -> None:
        with httpx.Client(base_url=live_server.url, headers=headers, timeout=30) as client:
            barrier.wait()
            response = client.post(
                f"/v1/memory_stores/{store['id']}/memories/{memory['id']}",
                json={
                    "content": f"writer {index}",
                    "precondition": {"type": "content_sha256", "content_sha256": sha("0")},
                },
            )
            statuses.append(response.status_code)

    threads = [threading.Thread(target=write, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] + [409] * 7
    assert MemoryVersion.objects.filter(memory_id=memory["id"], operation="modified").count() == 1


@pytest.mark.django_db(transaction=True)
def test_reference_client(live_server):
    tenant = make_tenant("sdk")
    sdk = registry_client(live_server.url, tenant.api_key)
    store = sdk.beta.memory_stores.create(name="Notes", description="d", metadata={"k": "v"})
    assert store.id.startswith("mems_") and store.metadata == {"k": "v"}
    memory = sdk.beta.memory_stores.memories.create(store.id, path="/a/b.md", content="hello")
    assert memory.content_sha256 == sha("hello")
    fetched = sdk.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id)
    assert fetched.content == "hello"
    updated = sdk.beta.memory_stores.memories.update(
        memory.id,
        memory_store_id=store.id,
        content="bye",
        precondition={"type": "content_sha256", "content_sha256": sha("hello")},
    )
    assert updated.content_sha256 == sha("bye")
    with pytest.raises(anthropic.ConflictError):
        sdk.beta.memory_stores.memories.update(
            memory.id,
            memory_store_id=store.id,
            content="late",
            precondition={"type": "content_sha256", "content_sha256": sha("hello")},
        )
    listed = list(sdk.beta.memory_stores.memories.list(store.id, path_prefix="/a/"))
    assert [item.path for item in listed] == ["/a/b.md"]
    versions = list(sdk.beta.memory_stores.memory_versions.list(store.id))
    assert {version.operation for version in versions} == {"created", "modified"}
    sdk.beta.memory_stores.memories.delete(memory.id, memory_store_id=store.id)
    assert sdk.beta.memory_stores.archive(store.id).archived_at is not None
    assert [item.id for item in sdk.beta.memory_stores.list(include_archived=True)] == [store.id]
