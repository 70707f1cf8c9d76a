"""Django admin for skills: skills with their versions, and each version's file list (path and size only)."""

from django.contrib import admin
from django.http import HttpRequest

from registry.core.admin import OneByOneDeletion, ReadOnlyAdmin
from registry.skills import services
from registry.skills.models import Skill, SkillFile, SkillVersion


class SkillVersionInline(admin.TabularInline):  # type: ignore[type-arg]
    """A skill's versions, read-only."""

    model = SkillVersion
    fields = ("version", "name", "description", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


class SkillFileInline(admin.TabularInline):  # type: ignore[type-arg]
    """A version's files: path and size, never the content."""

    model = SkillFile
    fields = ("path", "size_bytes")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Skill)
class SkillAdmin(OneByOneDeletion, ReadOnlyAdmin):
    """Skills, read-only: uploads go through the API; a deletion here removes the bundles' bytes too."""

    list_display = ("id", "display_name", "name", "workspace", "latest_version", "created_at")
    search_fields = ("id", "name", "display_name")
    readonly_fields = ("id", "workspace", "name", "display_name", "latest_version", "created_at", "updated_at")
    inlines = [SkillVersionInline]

    def delete_model(self, request: HttpRequest, obj: Skill) -> None:
        services.skill_delete(skill=obj)


@admin.register(SkillVersion)
class SkillVersionAdmin(ReadOnlyAdmin):
    """One version and its file list, read-only."""

    list_display = ("version", "skill", "name", "created_at")
    search_fields = ("skill__id", "name", "version")
    readonly_fields = ("skill", "version", "name", "description", "created_at")
    inlines = [SkillFileInline]
    deletable = False
