"""Reads for skills: version lookups, the zip of a version, one file's bytes, and agents' references."""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from typing import IO, Any

from django.conf import settings
from django.db.models import QuerySet

from registry.core.errors import invalid_request, not_found
from registry.core.storage import upload_storage
from registry.skills.models import Skill, SkillFile, SkillVersion

LATEST = "latest"


def skill_versions(*, skill: Skill) -> QuerySet[SkillVersion]:
    return SkillVersion.objects.filter(skill=skill)


def skill_version_get(*, skill: Skill, version: str) -> SkillVersion:
    """A version by id, or the newest one for `latest`."""
    wanted = skill.latest_version if version == LATEST else version
    found = skill_versions(skill=skill).filter(version=wanted).first()
    if found is None:
        raise not_found(f"Skill {skill.id} has no version {version}.")
    return found


def skill_version_archive(*, version: SkillVersion) -> IO[bytes]:
    """A zip of the version's bundle, its files under a top-level directory named after the skill."""
    # Closed by the response once it is sent.
    archive = tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE)  # noqa: SIM115
    storage = upload_storage()
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
        for file in version.files.order_by("path"):
            with (
                storage.open(file.storage_name, "rb") as source,
                bundle.open(f"{version.name}/{file.path}", "w") as target,
            ):
                shutil.copyfileobj(source, target)
    archive.seek(0)
    return archive  # type: ignore[return-value]


def skill_file_content(file: SkillFile) -> IO[bytes]:
    """One file of a version's bundle, opened from the storage."""
    stream: IO[bytes] = upload_storage().open(file.storage_name, "rb")
    return stream


def skill_files_in_reading_order(version: SkillVersion) -> list[SkillFile]:
    """The version's files, SKILL.md first, then by path."""
    return sorted(version.files.all(), key=lambda file: (file.path != "SKILL.md", file.path))


def check_agent_skills(*, workspace_id: str, skills: Iterable[dict[str, Any]]) -> None:
    """Every `custom` skill of an agent names a skill of its workspace, and `latest` or one of its versions."""
    for index, reference in enumerate(skills):
        if reference["type"] != "custom":
            continue
        skill = Skill.objects.filter(workspace_id=workspace_id, pk=reference["skill_id"]).first()
        if skill is None:
            raise invalid_request(
                f"skills[{index}].skill_id: no custom skill {reference['skill_id']} in this workspace."
            )
        version = reference.get("version") or LATEST
        if version != LATEST and not skill_versions(skill=skill).filter(version=version).exists():
            raise invalid_request(f"skills[{index}].version: skill {skill.id} has no version {version}.")


def skill_version_for(*, workspace_id: str, skill_id: str, version: str | None) -> SkillVersion | None:
    """The workspace's skill version (`latest` or none: its latest), or None when either is gone."""
    skill = Skill.objects.filter(workspace_id=workspace_id, pk=skill_id).first()
    if skill is None:
        return None
    wanted = version or LATEST
    return SkillVersion.objects.filter(
        skill=skill, version=skill.latest_version if wanted == LATEST else wanted
    ).first()
