"""Django admin for skills: skills with their versions, and each version's file list (path and size only)."""

from django.contrib import admin
from django.http import HttpRequest

from registry.core.admin import ReadOnlyAdmin, ReadOnlyInline
from registry.skills import services
from registry.skills.models import Skill, SkillFile, SkillVersion


class SkillVersionInline(ReadOnlyInline):
    """A skill's versions, read-only."""

    model = SkillVersion
    fields = ("version", "name", "description", "created_at")
    show_change_link = True


class SkillFileInline(ReadOnlyInline):
    """A version's files: path and size, never the content."""

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
class SkillVersionAdmin(ReadOnlyAdmin):
    """One version and its file list, read-only; a deletion goes through the API's service (which keeps a
    skill's last version, and removes the bundle's bytes)."""

    workspace_path = "skill__workspace"
    list_display = ("version", "skill", "name", "created_at")
    search_fields = ("skill__id", "name", "version")
    readonly_fields = ("skill", "version", "name", "description", "created_at")
    inlines = [SkillFileInline]

    def delete_model(self, request: HttpRequest, obj: SkillVersion) -> None:
        services.skill_version_delete(version=obj)
