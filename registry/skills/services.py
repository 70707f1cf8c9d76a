"""Writes for skills: create (with its first version), add and delete versions, delete a skill.

Version ids are Unix epoch microseconds, strictly increasing per skill (taken under the skill's row
lock); the bundle's files go to the storage, one object each, and leave it once their rows are gone.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from registry.core.errors import invalid_request
from registry.core.storage import StagedWrites, delete_after_commit
from registry.skills.bundles import Bundle
from registry.skills.models import Skill, SkillFile, SkillVersion
from registry.workspaces.models import Workspace


def _next_version(latest: str | None) -> str:
    now = time.time_ns() // 1000
    return str(max(now, int(latest) + 1) if latest else now)


def _store_version(skill: Skill, version_id: str, bundle: Bundle) -> SkillVersion:
    version = SkillVersion.objects.create(
        skill=skill, version=version_id, name=bundle.name, description=bundle.description
    )
    prefix = f"skills/{skill.workspace_id}/{skill.id}/{version_id}"
    with StagedWrites() as staged:
        SkillFile.objects.bulk_create(
            SkillFile(
                version=version,
                path=file.path,
                size_bytes=file.part.size or 0,
                storage_name=staged.save(f"{prefix}/{index}", file.part),
            )
            for index, file in enumerate(bundle.files)
        )
    return version


def _stored_names(versions: QuerySet[Any] | list[int]) -> list[str]:
    return list(SkillFile.objects.filter(version__in=versions).values_list("storage_name", flat=True))


@transaction.atomic
def skill_create(*, workspace: Workspace, bundle: Bundle, display_name: str | None) -> Skill:
    """A skill named by its bundle's manifest; `display_name` defaults to that name."""
    version_id = _next_version(None)
    skill = Skill.objects.create(
        workspace=workspace, name=bundle.name, display_name=display_name or bundle.name, latest_version=version_id
    )
    _store_version(skill, version_id, bundle)
    return skill


@transaction.atomic
def skill_version_create(*, skill: Skill, bundle: Bundle) -> SkillVersion:
    """A new latest version; its manifest must keep the skill's name."""
    locked = Skill.objects.select_for_update().get(pk=skill.pk)
    if bundle.name != locked.name:
        raise invalid_request(f"SKILL.md: `name` must stay {locked.name!r} for this skill (got {bundle.name!r}).")
    version = _store_version(locked, _next_version(locked.latest_version), bundle)
    locked.latest_version = version.version
    locked.save(update_fields=["latest_version", "updated_at"])
    return version


@transaction.atomic
def skill_version_delete(*, version: SkillVersion) -> None:
    """Delete one version (not the only one: a skill always has a version); `latest` moves back."""
    locked = Skill.objects.select_for_update().get(pk=version.skill_id)
    remaining = SkillVersion.objects.filter(skill=locked).exclude(pk=version.pk)
    newest = remaining.order_by("-version").values_list("version", flat=True).first()
    if newest is None:
        raise invalid_request(
            f"version: {version.version} is the only version of {locked.id}; delete the skill instead."
        )
    delete_after_commit(_stored_names([version.pk]))
    version.delete()
    locked.latest_version = newest
    locked.save(update_fields=["latest_version", "updated_at"])


@transaction.atomic
def skill_delete(*, skill: Skill) -> None:
    """Delete the skill with every version; the bundle's bytes go once the deletion commits."""
    delete_after_commit(_stored_names(SkillVersion.objects.filter(skill=skill).values("pk")))
    Skill.objects.filter(pk=skill.pk).delete()
