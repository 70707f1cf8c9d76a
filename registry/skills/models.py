"""Skill, its immutable versions, and the files of each version's bundle (bytes in the storage)."""

from __future__ import annotations

from django.db import models

from registry.core.ids import public_id_field
from registry.core.models import WorkspaceResource


class Skill(WorkspaceResource):
    """A custom skill: `name` is the slug fixed by its first upload; `latest_version` its newest version."""

    id = public_id_field("skill")
    name = models.CharField(max_length=64)
    display_name = models.CharField(max_length=255)
    latest_version = models.CharField(max_length=32)

    title_field = "display_name"


class SkillVersion(models.Model):
    """One upload of a skill. `version` is its id: Unix epoch microseconds, increasing per skill."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    version = models.CharField(max_length=32)
    name = models.CharField(max_length=64)
    description = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["skill", "version"], name="skill_version_unique")]

    def __str__(self) -> str:
        return f"{self.skill_id} version {self.version}"


class SkillFile(models.Model):
    """One file of a version's bundle: its path below the bundle's directory and where its bytes are."""

    version = models.ForeignKey(SkillVersion, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024)
    size_bytes = models.BigIntegerField()
    storage_name = models.CharField(max_length=1024)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "path"], name="skill_file_path_unique")]

    def __str__(self) -> str:
        return self.path
