"""Django admin for skills: skills with their versions, and each version's files (path and size, the content of
SKILL.md and the other text files, escaped, and every file's bytes as a download from the admin's own view,
`<version id>/files/<file id>/`, scoped to the staff member's workspaces like the page)."""

from functools import partial

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.http import FileResponse, Http404, HttpRequest
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString

from registry.core.admin import ReadOnlyAdmin, ReadOnlyInline
from registry.core.admin_reading import ReadingStyles, served, text_preview, viewable
from registry.skills import selectors, services
from registry.skills.models import Skill, SkillFile, SkillVersion


class SkillVersionInline(ReadOnlyInline):
    """A skill's versions, read-only."""

    model = SkillVersion
    fields = ("version", "name", "description", "created_at")
    show_change_link = True


class SkillFileInline(ReadOnlyInline):
    """A version's files: path and size (the page shows their content)."""

    model = SkillFile
    fields = ("path", "size_bytes")


@admin.register(Skill)
class SkillAdmin(ReadOnlyAdmin):
    """Skills, read-only: uploads go through the API; a deletion here removes the bundles' bytes too."""

    list_display = ("id", "display_name", "name", "workspace", "latest_version", "created_at")
    search_fields = ("id", "name", "display_name")
    readonly_fields = ("id", "workspace", "name", "display_name", "latest_version", "created_at", "updated_at")
    inlines = [SkillVersionInline]

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        services.skill_delete(skill=obj)


@admin.register(SkillVersion)
class SkillVersionAdmin(ReadingStyles, ReadOnlyAdmin):
    """One version, its file list and its text files' contents, read-only; a deletion goes through the API's
    service (which keeps a skill's last version, and removes the bundle's bytes)."""

    workspace_path = "skill__workspace"
    list_display = ("version", "skill", "name", "created_at")
    search_fields = ("skill__id", "name", "version")
    fields = ("skill", "version", "name", "description", "created_at", "contents")
    readonly_fields = fields
    inlines = [SkillFileInline]

    @admin.display(description="contents")
    def contents(self, version: SkillVersion) -> SafeString:
        files = [
            {
                "path": file.path,
                "size_bytes": file.size_bytes,
                "preview": text_preview(partial(selectors.skill_file_content, file), file.size_bytes),
                "download": reverse("admin:skills_skillversion_file", args=[quote(version.pk), file.pk]),
            }
            for file in selectors.skill_files_in_reading_order(version)
        ]
        return render_to_string("admin/reading/skill_files.html", {"files": files})

    def delete_model(self, request: HttpRequest, obj: SkillVersion) -> None:
        services.skill_version_delete(version=obj)

    def get_urls(self) -> list[URLPattern]:
        download = path(
            "<path:object_id>/files/<int:file_id>/",
            self.admin_site.admin_view(self.file_view),
            name="skills_skillversion_file",
        )
        return [download, *super().get_urls()]

    def file_view(self, request: HttpRequest, object_id: str, file_id: int) -> FileResponse:
        """One file of the version, as an attachment (never shown as a page), for whoever may view the version."""
        version = viewable(self, request, unquote(object_id))
        file = version.files.filter(pk=file_id).first()
        if file is None:
            raise Http404
        name = file.path.rsplit("/", 1)[-1]
        return served(selectors.skill_file_content(file), filename=name, content_type="application/octet-stream")
