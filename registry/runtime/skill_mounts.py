"""An agent's skills in the sandbox, and the system prompt section that lists them.

Each `custom` skill (the version the agent pins; `latest` is the skill's newest version) is unpacked
once per host under `<sandbox root>/shared/skills/<skill id>/<version>/` (versions are immutable) and bound
read-only at `/mnt/session/skills/<name>/`, `name` from the version's `SKILL.md`. The prompt lists each
skill's name, description and path; the agent reads `SKILL.md` and the rest with its tools when it
needs them. This deployment has no `anthropic` skills: an agent that names one gets `SkillsUnavailable`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from registry.core.storage import upload_storage
from registry.sandbox.spec import Mount
from registry.skills.models import SkillVersion
from registry.skills.selectors import skill_version_for

SKILLS_ROOT = "/mnt/session/skills"


class SkillsUnavailable(Exception):
    """The agent names skills this deployment cannot provide."""


@dataclass(frozen=True)
class SkillListing:
    """A skill as the system prompt lists it: where the agent finds its folder."""

    name: str
    description: str
    folder: str


@dataclass(frozen=True)
class StagedSkill:
    name: str
    description: str
    mount: Mount

    @property
    def listing(self) -> SkillListing:
        return SkillListing(self.name, self.description, self.mount.target)


def worker_skill_listings(*, workspace_id: str, agent: dict[str, Any]) -> list[SkillListing]:
    """The skills an environment worker downloads into `skills/<name>/` under its working directory (the
    reference client's `AgentToolContext`); a skill it cannot find is left out, as the worker leaves it."""
    listings = []
    for reference in agent.get("skills") or []:
        version = _version(workspace_id, reference) if reference["type"] == "custom" else None
        if version is not None:
            folder = os.path.basename(version.name.strip()) or version.skill_id
            listings.append(SkillListing(version.name, version.description, f"skills/{folder}"))
    return listings


def agent_skills(*, workspace_id: str, agent: dict[str, Any], root: Path) -> list[StagedSkill]:
    references = agent.get("skills") or []
    unavailable = [reference["skill_id"] for reference in references if reference["type"] != "custom"]
    if unavailable:
        raise SkillsUnavailable(
            f"This deployment has no Anthropic skills; the agent names {', '.join(unavailable)}. "
            "Upload them as custom skills or remove them from the agent."
        )
    staged = []
    for reference in references:
        version = _version(workspace_id, reference)
        if version is None:
            raise SkillsUnavailable(f"Skill {reference['skill_id']} version {reference.get('version')} is gone.")
        folder = _unpack(version, root)
        staged.append(StagedSkill(version.name, version.description, Mount(folder, f"{SKILLS_ROOT}/{version.name}")))
    return staged


def _version(workspace_id: str, reference: dict[str, Any]) -> SkillVersion | None:
    return skill_version_for(
        workspace_id=workspace_id, skill_id=reference["skill_id"], version=reference.get("version")
    )


def _unpack(version: SkillVersion, root: Path) -> Path:
    """The version's files on the host, unpacked once (into a temporary folder, then renamed)."""
    target = root / "skills" / version.skill_id / version.version
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    for directory in (root / "skills", target.parent):
        os.chmod(directory, 0o711)
    unpacking = Path(tempfile.mkdtemp(dir=target.parent))
    storage = upload_storage()
    for file in version.files.all():
        if any(part in ("", ".", "..") for part in file.path.split("/")):
            continue  # refused at upload; never written outside the folder
        destination = unpacking.joinpath(*file.path.split("/"))
        destination.parent.mkdir(parents=True, exist_ok=True)
        with storage.open(file.storage_name, "rb") as source, open(destination, "wb") as copy:
            shutil.copyfileobj(source, copy)
    for folder, _, names in os.walk(unpacking):
        os.chmod(folder, 0o755)
        for name in names:
            os.chmod(os.path.join(folder, name), 0o444)
    try:
        os.rename(unpacking, target)
    except OSError:  # another session unpacked it meanwhile
        shutil.rmtree(unpacking, ignore_errors=True)
    return target


def skills_prompt(skills: list[SkillListing]) -> str | None:
    if not skills:
        return None
    lines = [
        "# Skills",
        "These skills are installed. When a task matches one, read its SKILL.md first (with your file tools) "
        "and follow it; read the skill's other files only when SKILL.md points you to them.",
    ]
    lines += [f"- {skill.name}: {skill.description} (at {skill.folder}/SKILL.md)" for skill in skills]
    return "\n".join(lines)
