"""Skills through the API and the reference client: bundle uploads and their validation, versions,
content archives, deletion (bytes included), tenancy, and agents that reference custom skills."""

from __future__ import annotations

import io
import zipfile

import anthropic
import pytest

from registry.skills.models import Skill, SkillFile
from tests.support.api_errors import assert_error
from tests.support.clients import registry_client
from tests.support.tenants import make_tenant
from tests.support.uploads import multipart, stored_objects

pytestmark = pytest.mark.usefixtures("uploads_dir")

MANIFEST = b"---\nname: pdf-tools\ndescription: Fill and read PDF forms.\n---\n\n# PDF tools\n"
BUNDLE = {"pdf-tools/SKILL.md": MANIFEST, "pdf-tools/scripts/fill.py": b"print('fill')\n"}


def upload(api, path, files, fields=()):
    parts = [("files[]", name, "application/octet-stream", data) for name, data in files.items()]
    body, content_type = multipart([*parts, *fields])
    return api.generic("POST", path, body, content_type=content_type)


def create_skill(api, files=BUNDLE, fields=()):
    response = upload(api, "/v1/skills", files, fields)
    assert response.status_code == 200, response.content
    return response.json()


def new_version(api, skill_id, description=b"Second take."):
    manifest = MANIFEST.replace(b"Fill and read PDF forms.", description)
    response = upload(api, f"/v1/skills/{skill_id}/versions", {"pdf-tools/SKILL.md": manifest})
    assert response.status_code == 200, response.content
    return response.json()


def archive_of(response):
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


def test_create_retrieve_and_version_content(api):
    skill = create_skill(api)
    assert set(skill) == {"id", "type", "display_name", "latest_version_id", "source", "created_at", "updated_at"}
    assert skill["id"].startswith("skill_") and skill["type"] == "skill"
    assert skill["display_name"] == "pdf-tools" and skill["source"] == {"type": "custom"}
    assert api.get(f"/v1/skills/{skill['id']}").json() == skill

    version = api.get(f"/v1/skills/{skill['id']}/versions/latest").json()
    assert version == {
        "id": skill["latest_version_id"],
        "type": "skill_version",
        "skill_id": skill["id"],
        "name": "pdf-tools",
        "description": "Fill and read PDF forms.",
        "created_at": version["created_at"],
    }
    content = api.get(f"/v1/skills/{skill['id']}/versions/{version['id']}/content", HTTP_ACCEPT="application/binary")
    assert content["Content-Type"] == "application/zip"
    assert content["Content-Disposition"] == 'attachment; filename="pdf-tools.zip"'
    with archive_of(content) as archive:
        assert {name: archive.read(name) for name in archive.namelist()} == BUNDLE


def test_display_name_is_optional_and_single_line(api):
    named = create_skill(api, fields=[("display_name", None, None, b"PDF Tools")])
    assert named["display_name"] == "PDF Tools"
    response = upload(api, "/v1/skills", BUNDLE, [("display_name", None, None, b"two\nlines")])
    assert_error(response, 400, "invalid_request_error", "display_name")


def test_versions_list_latest_and_delete(api, uploads_dir, django_capture_on_commit_callbacks):
    skill = create_skill(api)
    first = skill["latest_version_id"]
    second = new_version(api, skill["id"])
    assert second["description"] == "Second take." and int(second["id"]) > int(first)
    assert api.get(f"/v1/skills/{skill['id']}").json()["latest_version_id"] == second["id"]
    listed = api.get(f"/v1/skills/{skill['id']}/versions", {"limit": 1}).json()
    assert [item["id"] for item in listed["data"]] == [second["id"]]
    after = api.get(f"/v1/skills/{skill['id']}/versions", {"page": listed["next_page"]}).json()
    assert [item["id"] for item in after["data"]] == [first] and after["next_page"] is None

    with django_capture_on_commit_callbacks(execute=True):
        deleted = api.delete(f"/v1/skills/{skill['id']}/versions/{second['id']}")
    assert deleted.json() == {"id": second["id"], "type": "skill_version_deleted"}
    assert api.get(f"/v1/skills/{skill['id']}").json()["latest_version_id"] == first
    assert_error(api.get(f"/v1/skills/{skill['id']}/versions/{second['id']}"), 404, "not_found_error")
    assert len(stored_objects(uploads_dir)) == len(BUNDLE)
    only = api.delete(f"/v1/skills/{skill['id']}/versions/{first}")
    assert_error(only, 400, "invalid_request_error", "only version")


def test_new_version_must_keep_the_name(api):
    skill = create_skill(api)
    renamed = {"other/SKILL.md": b"---\nname: other\ndescription: d\n---\n"}
    response = upload(api, f"/v1/skills/{skill['id']}/versions", renamed)
    assert_error(response, 400, "invalid_request_error", "'pdf-tools'")


def test_delete_removes_skill_versions_and_bytes(api, uploads_dir, django_capture_on_commit_callbacks):
    skill = create_skill(api)
    new_version(api, skill["id"])
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/v1/skills/{skill['id']}").json() == {"id": skill["id"], "type": "skill_deleted"}
    assert stored_objects(uploads_dir) == [] and SkillFile.objects.count() == 0
    assert_error(api.get(f"/v1/skills/{skill['id']}"), 404, "not_found_error")


@pytest.mark.parametrize(
    ("files", "mentions"),
    [
        ({}, "at least one file"),
        ({"pdf-tools/README.md": b"hi"}, "SKILL.md is missing at the root of pdf-tools/"),
        ({"pdf-tools/docs/SKILL.md": MANIFEST}, "SKILL.md is missing"),
        ({"pdf-tools/SKILL.md": MANIFEST, "other/x.txt": b"x"}, "one top-level directory"),
        ({"SKILL.md": MANIFEST}, "top-level directory"),
        ({"pdf-tools/../SKILL.md": MANIFEST}, "relative path"),
        ({"/pdf-tools/SKILL.md": MANIFEST}, "relative path"),
        ({"pdf-tools/SKILL.md": b"# no front matter\n"}, "front matter"),
        ({"pdf-tools/SKILL.md": b"---\ndescription: d\n---\n"}, "`name`"),
        ({"pdf-tools/SKILL.md": b"---\nname: pdf-tools\n---\n"}, "`description`"),
        ({"pdf-tools/SKILL.md": b"---\nname: PDF Tools\ndescription: d\n---\n"}, "lowercase"),
        ({"pdf-tools/SKILL.md": b"---\nname: [unclosed\n---\n"}, "not valid YAML"),
        ({"pdf-tools/SKILL.md": b"---\n- a list\n---\n"}, "mapping"),
        ({"pdf-tools/SKILL.md": b"\xff\xfe---\n"}, "UTF-8"),
    ],
)
def test_bundle_validation_is_400_naming_the_problem(api, uploads_dir, files, mentions):
    assert_error(upload(api, "/v1/skills", files), 400, "invalid_request_error", mentions)
    assert Skill.objects.count() == 0 and stored_objects(uploads_dir) == []


def test_unknown_parts_and_fields_are_400(api):
    body, content_type = multipart([("bundle", "pdf-tools/SKILL.md", None, MANIFEST)])
    assert_error(
        api.generic("POST", "/v1/skills", body, content_type=content_type), 400, "invalid_request_error", "bundle"
    )
    response = upload(api, "/v1/skills", BUNDLE, [("display_title", None, None, b"t")])
    assert_error(response, 400, "invalid_request_error", "display_title")
    skill = create_skill(api)
    response = upload(api, f"/v1/skills/{skill['id']}/versions", BUNDLE, [("display_name", None, None, b"t")])
    assert_error(response, 400, "invalid_request_error", "display_name")


def test_other_workspace_sees_nothing(api, other_tenant):
    skill = create_skill(api)
    base = f"/v1/skills/{skill['id']}"
    version = f"{base}/versions/{skill['latest_version_id']}"
    other = other_tenant.client
    for method, path in [
        ("get", base),
        ("delete", base),
        ("get", f"{base}/versions"),
        ("get", version),
        ("get", f"{base}/versions/latest"),
        ("get", f"{version}/content"),
        ("delete", version),
    ]:
        assert_error(getattr(other, method)(path), 404, "not_found_error")
    assert_error(upload(other, f"{base}/versions", BUNDLE), 404, "not_found_error")
    for params in ({}, {"source": "custom"}):
        assert other.get("/v1/skills", params).json()["data"] == []
    assert api.get(base).json() == skill


def test_list_and_source_filter(api):
    skills = [create_skill(api)["id"] for _ in range(3)]
    assert [item["id"] for item in api.get("/v1/skills").json()["data"]] == skills[::-1]
    assert [item["id"] for item in api.get("/v1/skills", {"source": "custom", "order": "asc"}).json()["data"]] == skills
    assert api.get("/v1/skills", {"source": "anthropic"}).json()["data"] == []
    assert_error(api.get("/v1/skills", {"source": "elsewhere"}), 400, "invalid_request_error", "source")


def test_agent_custom_skills_must_exist(api, other_tenant):
    skill = create_skill(api)
    foreign = create_skill(other_tenant.client)
    version = skill["latest_version_id"]

    def agent_with(*skills):
        return api.post("/v1/agents", {"name": "a", "model": "m", "skills": list(skills)}, format="json")

    good = agent_with(
        {"type": "custom", "skill_id": skill["id"]},
        {"type": "custom", "skill_id": skill["id"], "version": version},
        {"type": "anthropic", "skill_id": "xlsx"},
    )
    assert good.status_code == 200, good.content
    assert [entry["version"] for entry in good.json()["skills"]] == ["latest", version, "latest"]
    for reference, mentions in [
        ({"type": "custom", "skill_id": "skill_missing00000000000000"}, "skills[0].skill_id"),
        ({"type": "custom", "skill_id": foreign["id"]}, "skills[0].skill_id"),
        ({"type": "custom", "skill_id": skill["id"], "version": "1"}, "skills[0].version"),
    ]:
        assert_error(agent_with(reference), 400, "invalid_request_error", mentions)
    agent = good.json()["id"]
    missing = {"skills": [{"type": "custom", "skill_id": foreign["id"]}]}
    assert_error(api.post(f"/v1/agents/{agent}", missing, format="json"), 400, "invalid_request_error", "skill_id")
    assert api.get(f"/v1/agents/{agent}").json()["version"] == 1


@pytest.mark.django_db(transaction=True)
def test_reference_client(live_server, uploads_dir):
    tenant = make_tenant("sdk-skills")
    client = registry_client(live_server.url, tenant.api_key)
    files = [(name, data, "text/markdown") for name, data in BUNDLE.items()]
    skill = client.beta.skills.create(files=files, display_name="PDF")
    assert skill.id.startswith("skill_") and skill.display_name == "PDF" and skill.source.type == "custom"
    assert client.skills.retrieve(skill.id).model_dump() == client.beta.skills.retrieve(skill.id).model_dump()

    first = client.beta.skills.versions.retrieve("latest", skill_id=skill.id)
    assert first.id == skill.latest_version_id and first.name == "pdf-tools"
    manifest = MANIFEST.replace(b"Fill and read PDF forms.", b"v2")
    second = client.skills.versions.create(skill.id, files=[("pdf-tools/SKILL.md", manifest)])
    assert second.description == "v2" and client.skills.retrieve(skill.id).latest_version_id == second.id
    assert [item.id for item in client.beta.skills.versions.list(skill.id, limit=1)] == [second.id, first.id]
    with zipfile.ZipFile(io.BytesIO(client.beta.skills.versions.download(first.id, skill_id=skill.id).read())) as zf:
        assert sorted(zf.namelist()) == sorted(BUNDLE)

    assert [item.id for item in client.beta.skills.list(source="custom")] == [skill.id]
    assert client.beta.skills.versions.delete(second.id, skill_id=skill.id).type == "skill_version_deleted"
    with pytest.raises(anthropic.BadRequestError):
        client.beta.skills.create(files=[("loose.md", b"no directory")])
    assert client.beta.skills.delete(skill.id).type == "skill_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.skills.retrieve(skill.id)
    assert stored_objects(uploads_dir) == []
