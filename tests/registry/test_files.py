"""Files through the API, the reference client and a real ASGI server: upload, metadata, content,
list, delete, the upload size limit, expiry, tenancy, and sessions that mount a file."""

from __future__ import annotations

import uuid
from datetime import timedelta

import anthropic
import httpx
import pytest
from django.utils import timezone

from registry.files.models import File
from tests.support.api_errors import assert_error
from tests.support.clients import registry_client
from tests.support.live import live_registry
from tests.support.tenants import make_tenant
from tests.support.uploads import multipart, stored_objects

# Every byte value, so the round trip proves nothing is decoded or re-encoded on the way.
PAYLOAD = bytes(range(256)) * 40


def upload(api, parts, **extra):
    body, content_type = multipart(parts)
    return api.generic("POST", "/v1/files", body, content_type=content_type, **extra)


def upload_ok(api, data=PAYLOAD, filename="report.bin", content_type="application/octet-stream", fields=()):
    response = upload(api, [("file", filename, content_type, data), *fields])
    assert response.status_code == 200, response.content
    return response.json()


def test_upload_download_round_trip(api, uploads_dir):
    file = upload_ok(api, filename="report.bin")
    assert set(file) == {
        "id",
        "type",
        "filename",
        "mime_type",
        "size_bytes",
        "created_at",
        "downloadable",
        "expires_at",
        "scope",
    }
    assert file["id"].startswith("file_") and file["type"] == "file"
    assert file["filename"] == "report.bin" and file["mime_type"] == "application/octet-stream"
    assert file["size_bytes"] == len(PAYLOAD) and file["downloadable"] is True
    assert file["expires_at"] is None and file["scope"] is None
    assert api.get(f"/v1/files/{file['id']}").json() == file

    content = api.get(f"/v1/files/{file['id']}/content", HTTP_ACCEPT="application/binary")
    assert content.status_code == 200
    assert b"".join(content.streaming_content) == PAYLOAD
    assert content["Content-Type"] == "application/octet-stream"
    assert content["Content-Disposition"] == 'attachment; filename="report.bin"'
    assert [path.read_bytes() for path in stored_objects(uploads_dir)] == [PAYLOAD]


@pytest.mark.parametrize(
    ("sent", "content_type", "kept"),
    [
        ("../../etc/passwd", "text/plain", "passwd"),
        ("C:\\Users\\me\\notes.txt", "text/plain", "notes.txt"),
        ("dir/sub/", "text/plain", "unnamed.txt"),
        ("dir/..", "application/pdf", "unnamed.pdf"),
        ("tab\there.txt", "text/plain", "tabhere.txt"),
    ],
)
def test_filename_keeps_only_the_final_component(api, uploads_dir, sent, content_type, kept):
    file = upload_ok(api, data=b"x", filename=sent, content_type=content_type)
    assert file["filename"] == kept
    assert all(path.is_relative_to(uploads_dir) for path in stored_objects(uploads_dir))


@pytest.mark.parametrize(
    ("filename", "content_type", "mime_type"),
    [
        ("data.json", None, "application/json"),
        ("data.json", "text/csv", "text/csv"),
        ("blob", None, "application/octet-stream"),
    ],
)
def test_mime_type_is_declared_else_guessed(api, uploads_dir, filename, content_type, mime_type):
    assert upload_ok(api, data=b"{}", filename=filename, content_type=content_type)["mime_type"] == mime_type


def test_upload_over_the_limit_is_413_and_stores_nothing(api, uploads_dir, settings):
    settings.REGISTRY_MAX_UPLOAD_BYTES = 1000
    response = upload(api, [("file", "big.bin", None, b"x" * 2000)])
    assert_error(response, 413, "request_too_large", "1000")
    assert stored_objects(uploads_dir) == [] and File.objects.count() == 0
    assert upload_ok(api, data=b"x" * 100)["size_bytes"] == 100


@pytest.mark.parametrize(
    ("parts", "mentions"),
    [
        ([], "file"),
        ([("file", None, None, b"not a file part")], "file"),
        ([("file", "a.txt", None, b"a"), ("file", "b.txt", None, b"b")], "file"),
        ([("file", "a.txt", None, b"a"), ("other", "b.txt", None, b"b")], "other"),
        ([("file", "a.txt", None, b"a"), ("color", None, None, b"red")], "color"),
        ([("file", "a.txt", None, b"a"), ("expires_in_seconds", None, None, b"60")], "expires_in_seconds"),
        ([("file", "a.txt", None, b"a"), ("expires_in_seconds", None, None, b"7776001")], "expires_in_seconds"),
        ([("file", "a.txt", None, b"a"), ("expires_in_seconds", None, None, b"soon")], "expires_in_seconds"),
    ],
)
def test_bad_upload_form_is_400_and_stores_nothing(api, uploads_dir, parts, mentions):
    assert_error(upload(api, parts), 400, "invalid_request_error", mentions)
    assert stored_objects(uploads_dir) == [] and File.objects.count() == 0


def test_bad_multipart_envelope_is_400(api, uploads_dir):
    json_body = api.post("/v1/files", {"file": "x"}, format="json")
    assert_error(json_body, 400, "invalid_request_error", "multipart/form-data")
    no_boundary = api.generic("POST", "/v1/files", b"--x\r\n", content_type="multipart/form-data")
    assert_error(no_boundary, 400, "invalid_request_error", "boundary")
    assert stored_objects(uploads_dir) == []


def test_expiry(api, uploads_dir):
    file = upload_ok(api, fields=[("expires_in_seconds", None, None, b"3600")])
    stored = File.objects.get(pk=file["id"])
    assert stored.expires_at is not None
    assert stored.expires_at - stored.created_at == timedelta(seconds=3600)
    assert file["expires_at"].startswith(stored.expires_at.strftime("%Y-%m-%dT%H:%M:%S"))
    assert b"".join(api.get(f"/v1/files/{file['id']}/content").streaming_content) == PAYLOAD

    File.objects.filter(pk=file["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api.get(f"/v1/files/{file['id']}").json()["downloadable"] is False
    assert_error(api.get(f"/v1/files/{file['id']}/content"), 404, "not_found_error", "expired")
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    session = {"agent": agent["id"], "environment_id": environment["id"]}
    resources = [{"type": "file", "file_id": file["id"]}]
    assert_error(
        api.post("/v1/sessions", {**session, "resources": resources}, format="json"),
        400,
        "invalid_request_error",
        "expired",
    )


def test_list_pages_and_ids_filter(api, uploads_dir):
    ids = [upload_ok(api, data=str(index).encode(), filename=f"{index}.txt")["id"] for index in range(5)]
    first = api.get("/v1/files", {"limit": 2}).json()
    assert [item["id"] for item in first["data"]] == [ids[4], ids[3]]
    rest = api.get("/v1/files", {"limit": 10, "page": first["next_page"]}).json()
    assert [item["id"] for item in rest["data"]] == [ids[2], ids[1], ids[0]] and rest["next_page"] is None

    chosen = api.get("/v1/files", {"ids[]": [ids[1], ids[3], ids[1], "file_missing000000000000"]}).json()
    assert [item["id"] for item in chosen["data"]] == [ids[3], ids[1]] and chosen["next_page"] is None
    assert_error(api.get("/v1/files", {"ids": ids[0], "limit": 5}), 400, "invalid_request_error", "ids")
    too_many = [f"file_{index:024d}" for index in range(101)]
    assert_error(api.get("/v1/files", {"ids": too_many}), 400, "invalid_request_error", "ids")


def test_delete_removes_row_and_bytes(api, uploads_dir, django_capture_on_commit_callbacks):
    file = upload_ok(api)
    with django_capture_on_commit_callbacks(execute=True):
        deleted = api.delete(f"/v1/files/{file['id']}")
    assert deleted.json() == {"id": file["id"], "type": "file_deleted"}
    assert stored_objects(uploads_dir) == []
    for path in (f"/v1/files/{file['id']}", f"/v1/files/{file['id']}/content"):
        assert_error(api.get(path), 404, "not_found_error")
    assert_error(api.delete(f"/v1/files/{file['id']}"), 404, "not_found_error")


def test_other_workspace_sees_nothing(api, uploads_dir, other_tenant):
    file = upload_ok(api)
    other = other_tenant.client
    for method, suffix in (("get", ""), ("get", "/content"), ("delete", "")):
        assert_error(getattr(other, method)(f"/v1/files/{file['id']}{suffix}"), 404, "not_found_error")
    assert other.get("/v1/files").json()["data"] == []
    assert other.get("/v1/files", {"ids": file["id"]}).json()["data"] == []
    assert api.get(f"/v1/files/{file['id']}").status_code == 200


def test_session_file_resource_must_exist_in_the_workspace(api, uploads_dir, other_tenant):
    agent = api.post("/v1/agents", {"name": "a", "model": "m"}, format="json").json()
    environment = api.post("/v1/environments", {"name": "e"}, format="json").json()
    body = {"agent": agent["id"], "environment_id": environment["id"]}
    foreign = upload_ok(other_tenant.client)
    for missing in ("file_missing000000000000", foreign["id"]):
        resources = [{"type": "file", "file_id": missing}]
        response = api.post("/v1/sessions", {**body, "resources": resources}, format="json")
        assert_error(response, 400, "invalid_request_error", f"resources[0].file_id: no file {missing}")
    mine = upload_ok(api)
    created = api.post("/v1/sessions", {**body, "resources": [{"type": "file", "file_id": mine["id"]}]}, format="json")
    assert created.status_code == 200 and created.json()["resources"][0]["file_id"] == mine["id"]


@pytest.mark.django_db(transaction=True)
def test_reference_client(live_server, uploads_dir):
    tenant = make_tenant("sdk-files")
    client = registry_client(live_server.url, tenant.api_key)
    uploaded = client.beta.files.upload(file=("a.txt", b"hello, files", "text/plain"))
    assert uploaded.id.startswith("file_") and uploaded.filename == "a.txt" and uploaded.mime_type == "text/plain"
    assert uploaded.size_bytes == 12 and uploaded.downloadable is True and uploaded.expires_at is None
    expiring = client.beta.files.upload(file=("../b.bin", PAYLOAD, "application/octet-stream"), expires_in_seconds=3600)
    assert expiring.filename == "b.bin"
    assert expiring.expires_at is not None and expiring.expires_at - expiring.created_at == timedelta(hours=1)

    assert client.beta.files.retrieve_metadata(uploaded.id) == uploaded
    assert client.beta.files.download(uploaded.id).read() == b"hello, files"
    assert client.beta.files.download(expiring.id).read() == PAYLOAD
    assert [item.id for item in client.beta.files.list(limit=1)] == [expiring.id, uploaded.id]
    assert [item.id for item in client.beta.files.list(ids=[uploaded.id])] == [uploaded.id]

    assert client.beta.files.delete(uploaded.id).type == "file_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(uploaded.id)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.files.upload(file=("c.txt", b"c"), expires_in_seconds=10)
    assert [path.read_bytes() for path in stored_objects(uploads_dir)] == [PAYLOAD]


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_chunked_uploads_under_asgi(tmp_path):
    """Without a Content-Length the running byte count enforces the limit: 413, nothing stored."""
    tenant = make_tenant("chunked")
    headers = {"x-api-key": tenant.api_key}
    environment = {"REGISTRY_DATA_DIR": str(tmp_path), "REGISTRY_MAX_UPLOAD_BYTES": "4096"}

    def chunked(data: bytes):
        boundary = uuid.uuid4().hex
        body, content_type = multipart([("file", "c.bin", None, data)], boundary=boundary)
        return {"content": iter([body[:100], body[100:]]), "headers": {**headers, "content-type": content_type}}

    with live_registry(**environment) as url, httpx.Client(base_url=url, timeout=30) as client:
        refused = client.post("/v1/files", **chunked(b"x" * 5000))
        assert refused.status_code == 413 and refused.json()["error"]["type"] == "request_too_large"
        assert stored_objects(tmp_path / "uploads") == []
        accepted = client.post("/v1/files", **chunked(PAYLOAD[:3000]))
        assert accepted.status_code == 200, accepted.text
        assert client.get(f"/v1/files/{accepted.json()['id']}/content", headers=headers).content == PAYLOAD[:3000]


def test_idempotent_upload_stores_once(api, uploads_dir):
    body, content_type = multipart([("file", "a.txt", "text/plain", b"once")])
    first, again = (
        api.generic("POST", "/v1/files", body, content_type=content_type, HTTP_IDEMPOTENCY_KEY="upload-1")
        for _ in range(2)
    )
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert again["idempotent-replayed"] == "true"
    assert [path.read_bytes() for path in stored_objects(uploads_dir)] == [b"once"]
