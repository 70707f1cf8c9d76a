"""Previews of stored bytes in the admin through Django's test client: a file's page shows a text file's head
escaped in monospace, a raster image inline from the admin's own view (its type, `inline`, `nosniff`), SVG and
anything else only as a download; a skill version's page shows SKILL.md and its other text files. Another
workspace's file, skill version and memory store stay out of reach, through these views too."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse

from registry.files.admin import content_url
from registry.files.models import File
from registry.skills.models import SkillVersion
from tests.support.admin_pages import on, page
from tests.support.admin_staff import SKILL_MANIFEST, staff_client
from tests.support.tenants import Tenant
from tests.support.uploads import multipart

FILES = "/admin/files/file/"
SKILL_VERSIONS = "/admin/skills/skillversion/"
STORES = "/admin/memory/memorystore/"
PAYLOAD = b"<script>alert(1)</script><img src=x onerror=alert(1)>"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(24)
SVG = b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'
pytestmark = pytest.mark.usefixtures("uploads")


Part = tuple[str, str | None, str | None, bytes]  # field name, filename, content type, bytes


def uploaded(tenant: Tenant, path: str, parts: list[Part]) -> Any:
    body, content_type = multipart(parts)
    response = tenant.client.generic("POST", path, body, content_type=content_type)  # type: ignore[arg-type]
    assert response.status_code == 200, response.content
    return response.json()


def upload_file(tenant: Tenant, filename: str, content_type: str, data: bytes) -> File:
    return File.objects.get(pk=uploaded(tenant, "/v1/files", [("file", filename, content_type, data)])["id"])


def fetched(console: Client, url: str) -> tuple[Any, bytes]:
    """The answer at `url` and its whole body (read to the end, which closes the stored file it streams)."""
    response: Any = console.get(url)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


@pytest.fixture
def member(tenant: Tenant) -> Client:
    return staff_client("reader", {tenant.workspace: "viewer"})


def assert_escaped(html: str) -> None:
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<script>alert(1)" not in html and "<img src=x" not in html


# -- files ----------------------------------------------------------------------------------------------------
def test_a_text_file_shows_its_head_escaped_in_monospace(member: Client, tenant: Tenant):
    file = upload_file(tenant, "notes.html", "text/html", PAYLOAD + b"\n" + "é".encode() * 40_000)
    html = page(member, on(FILES, file.pk))

    assert '<pre class="reading-text">&lt;script&gt;' in html
    assert_escaped(html)
    assert f"The first 64 KB of {file.size_bytes} bytes." in html
    assert f'href="{content_url(file)}?download=1"' in html


def test_the_download_of_a_page_type_is_an_attachment_never_sniffed(member: Client, tenant: Tenant):
    file = upload_file(tenant, "notes.html", "text/html", PAYLOAD)
    response, body = fetched(member, content_url(file))

    assert response.status_code == 200 and body == PAYLOAD
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]


def test_an_image_is_shown_inline_from_the_admin_view(member: Client, tenant: Tenant):
    file = upload_file(tenant, "chart.png", "image/png", PNG)
    html = page(member, on(FILES, file.pk))
    response, body = fetched(member, content_url(file))

    assert f'<img class="reading-image" src="{content_url(file)}" alt="chart.png">' in html
    assert body == PNG and response["Content-Type"] == "image/png"
    assert response["Content-Disposition"] == 'inline; filename="chart.png"'
    assert response["X-Content-Type-Options"] == "nosniff"
    assert fetched(member, f"{content_url(file)}?download=1")[0]["Content-Disposition"].startswith("attachment;")


def test_svg_is_never_inline(member: Client, tenant: Tenant):
    file = upload_file(tenant, "logo.svg", "image/svg+xml", SVG)
    html = page(member, on(FILES, file.pk))
    response, body = fetched(member, content_url(file))

    assert "<img" not in html.split('id="content-main"')[1] and "onload=&quot;alert(1)&quot;" in html
    assert body == SVG and response["Content-Disposition"] == 'attachment; filename="logo.svg"'
    assert response["X-Content-Type-Options"] == "nosniff"


def test_other_files_show_type_size_and_a_download(member: Client, tenant: Tenant):
    file = upload_file(tenant, "data.bin", "application/octet-stream", b"\x00\x01\x02binary")
    html = page(member, on(FILES, file.pk))

    assert "application/octet-stream, 9 bytes: no preview." in html
    assert "Download data.bin" in html


# -- skills ---------------------------------------------------------------------------------------------------
def test_a_skill_version_shows_its_text_files(member: Client, tenant: Tenant):
    parts: list[Part] = [
        ("files[]", "pdf-tools/SKILL.md", "text/markdown", SKILL_MANIFEST + PAYLOAD),
        ("files[]", "pdf-tools/a_helper.py", "text/x-python", b"print('fill')\n" + PAYLOAD),
        ("files[]", "pdf-tools/form.bin", "application/octet-stream", b"\x00\xff"),
    ]
    skill = uploaded(tenant, "/v1/skills", parts)
    version = SkillVersion.objects.get(skill_id=skill["id"])
    html = page(member, on(SKILL_VERSIONS, version.pk))

    assert html.index('data-path="SKILL.md"') < html.index('data-path="a_helper.py"')
    assert "name: pdf-tools" in html and "print(&#x27;fill&#x27;)" in html
    assert 'data-path="form.bin"' in html and "Not text: not shown." in html
    assert_escaped(html)

    binary = version.files.get(path="form.bin")
    download = reverse("admin:skills_skillversion_file", args=[quote(version.pk), binary.pk])
    assert f'href="{download}"' in html
    response, body = fetched(member, download)
    assert response.status_code == 200 and body == b"\x00\xff"
    assert (
        response["Content-Disposition"].startswith("attachment")
        and 'filename="form.bin"' in response["Content-Disposition"]
    )
    assert response["X-Content-Type-Options"] == "nosniff"
    other = version.files.exclude(pk=binary.pk).first()
    assert other is not None
    missing = reverse("admin:skills_skillversion_file", args=[quote(version.pk), other.pk + 1000])
    assert member.get(missing).status_code == 404


# -- scoping ------------------------------------------------------------------------------------------------------
def test_another_workspaces_content_is_out_of_reach(member: Client, other_tenant: Tenant):
    file = upload_file(other_tenant, "secret.txt", "text/plain", b"theirs")
    skill = uploaded(other_tenant, "/v1/skills", [("files[]", "pdf-tools/SKILL.md", "text/markdown", SKILL_MANIFEST)])
    version = SkillVersion.objects.get(skill_id=skill["id"])
    store = other_tenant.client.post("/v1/memory_stores", {"name": "theirs"}, format="json").json()

    for url in (content_url(file), f"{content_url(file)}?download=1"):
        response, body = fetched(member, url)
        assert response.status_code in (403, 404) and b"theirs" not in body, url
    skill_file = version.files.get()
    download = reverse("admin:skills_skillversion_file", args=[quote(version.pk), skill_file.pk])
    response, body = fetched(member, download)
    assert response.status_code in (403, 404) and b"pdf-tools" not in body
    for url in (on(FILES, file.pk), on(SKILL_VERSIONS, version.pk), on(STORES, store["id"])):
        response = member.get(url)
        assert response.status_code in (302, 403, 404) and b"name: pdf-tools" not in response.content, url


def test_the_content_view_is_for_staff_only(client: Client, tenant: Tenant):
    file = upload_file(tenant, "notes.txt", "text/plain", b"hello")
    response, _ = fetched(client, content_url(file))

    assert response.status_code == 302 and "/admin/login/" in response["Location"]
