"""What a session brings into its sandbox, put together: the sandbox's spec and the prompt's sections.

`Provisioner` builds the session's `SandboxSpec` from its resources and its agent: file mounts, the
agent's skills, memory store folders, repositories (cloned by the runtime, outside the sandbox), the
environment's package layer and the placeholders of its `environment_variable` credentials. It
rebuilds the spec when the session's resources change (the backend restarts the shell with the new
mounts before the next tool call), and syncs memory folders around each tool call.

Failures: skills the deployment lacks and a package build that fails end the turn (`Unprovisioned`,
with the error to report); a repository that cannot be cloned is reported and left out, the session
stays usable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from registry.runtime import repositories
from registry.runtime.memory_mounts import MemoryMount, SyncReport, memory_prompt
from registry.runtime.mounts import file_mounts, files_prompt
from registry.runtime.secrets import session_injections
from registry.runtime.skill_mounts import SkillsUnavailable, agent_skills, skills_prompt, worker_skill_listings
from registry.sandbox.egress import NetworkPolicy
from registry.sandbox.interface import Sandbox, SandboxBackend, SessionPlace
from registry.sandbox.packages import PackageBuildFailed, ensure_layer
from registry.sandbox.spec import SANDBOX_HOME, Mount, SandboxSpec, SandboxUnavailable

ReportError = Callable[[str, str], None]  # (error type, message) -> a session.error event


class Unprovisioned(Exception):
    """The sandbox cannot be built as the session asks; the turn ends with this error."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


@dataclass(frozen=True)
class SessionSetup:
    """What the provisioner needs to know of the session (read once per runner)."""

    session_id: str
    workspace_id: str
    agent: dict[str, Any]
    environment_id: str
    environment_config: dict[str, Any]
    vault_ids: list[str]
    network: NetworkPolicy


@dataclass
class Provisioned:
    spec: SandboxSpec
    resources: list[dict[str, Any]]
    memory: list[MemoryMount] = field(default_factory=list)
    cloned: set[str] = field(default_factory=set)  # repositories tried into the workspace (not again)


def worker_prompt_sections(*, workspace_id: str, agent: dict[str, Any], resources: list[dict[str, Any]]) -> list[str]:
    """The prompt's sections for a session whose environment worker runs the tools: the memory stores it
    syncs at their mount paths and the skills it downloads into its working directory (it mounts no
    repositories or files: sessions with those are refused)."""
    sections = [memory_prompt(resources), skills_prompt(worker_skill_listings(workspace_id=workspace_id, agent=agent))]
    return [section for section in sections if section]


class Provisioner:
    def __init__(self, setup: SessionSetup, backend: SandboxBackend, report: ReportError) -> None:
        self.setup = setup
        self.backend = backend
        self.report = report
        self.current: Provisioned | None = None

    # -- the system prompt ---------------------------------------------------------------------
    def prompt_sections(self, resources: list[dict[str, Any]]) -> list[str]:
        sections = [
            repositories.repositories_prompt(resources),
            files_prompt(workspace_id=self.setup.workspace_id, resources=resources),
            memory_prompt(resources),
        ]
        with contextlib.suppress(SkillsUnavailable, SandboxUnavailable):  # reported when the sandbox is provisioned
            sections.append(skills_prompt([skill.listing for skill in agent_skills(**self._skill_args())]))
        return [section for section in sections if section]

    def _skill_args(self) -> dict[str, Any]:
        return {"workspace_id": self.setup.workspace_id, "agent": self.setup.agent, "root": self.backend.shared}

    # -- the sandbox ---------------------------------------------------------------------------
    def sandbox(self, resources: list[dict[str, Any]], *, catch_up: bool = False) -> Sandbox:
        """The session's sandbox with these resources mounted (rebuilt when they changed); `catch_up` (at a
        turn's start) first replaces a local workspace older than the session's latest snapshot."""
        if self.current is None or self.current.resources != resources:
            self.current = self._provision(resources)
        sandbox = self.backend.ensure(self.current.spec)
        if catch_up:
            sandbox.catch_up()
        self._clone_into_workspace(sandbox, resources)
        if catch_up:
            sandbox.warm()  # while the model thinks
        return sandbox

    def _provision(self, resources: list[dict[str, Any]]) -> Provisioned:
        setup = self.setup
        place = self.backend.place(setup.session_id)
        try:
            skills = agent_skills(**self._skill_args())
            layer = ensure_layer(
                self.backend,
                environment_id=setup.environment_id,
                packages=setup.environment_config.get("packages") or {},
                network=setup.network,
            )
        except SkillsUnavailable as missing:
            raise Unprovisioned("unknown_error", str(missing)) from None
        except PackageBuildFailed as failure:
            raise Unprovisioned(
                "unknown_error", f"The environment's packages could not be installed: {failure}"
            ) from None
        memory = [
            MemoryMount(
                resource=resource,
                session_id=setup.session_id,
                folder=place.disk.mounts / f"memory-{resource['id']}",
                manifest=place.home / "memory" / f"{resource['id']}.json",
                uid=place.uid,
            )
            for resource in resources
            if resource["type"] == "memory_store"
        ]
        for mount in memory:
            mount.prepare()
            mount.pull()
        env, injections = session_injections(
            session_id=setup.session_id, workspace_id=setup.workspace_id, vault_ids=setup.vault_ids
        )
        mounts = [
            *(layer.mounts if layer else ()),
            *file_mounts(workspace_id=setup.workspace_id, resources=resources, staging=place.disk.files),
            *(skill.mount for skill in skills),
            *(mount.mount for mount in memory),
            *self._repository_mounts(resources, place),
        ]
        spec = SandboxSpec(
            session_id=setup.session_id,
            workspace_id=setup.workspace_id,
            mounts=tuple(mounts),
            env={**(layer.env if layer else {}), **env},
            network=setup.network,
            injections=injections,
        )
        return Provisioned(spec, resources, memory)

    # -- repositories ------------------------------------------------------------------------------
    def _repository_mounts(self, resources: list[dict[str, Any]], place: SessionPlace) -> list[Mount]:
        """Repositories mounted outside the workspace: cloned into a folder of the session's disk, bound
        read-write."""
        mounts = []
        for resource in _repositories(resources, inside_workspace=False):
            placement = repositories.Placement(place.disk.mounts, f"repository-{resource['id']}", place.disk.staging)
            if self._materialize(resource, placement, place.uid):
                mounts.append(Mount(placement.root / placement.relative, resource["mount_path"], read_only=False))
        return mounts

    def _clone_into_workspace(self, sandbox: Sandbox, resources: list[dict[str, Any]]) -> None:
        """Repositories under the workspace live in it (and its snapshots); cloned once, when absent."""
        assert self.current is not None
        for resource in _repositories(resources, inside_workspace=True):
            if resource["id"] in self.current.cloned:
                continue
            self.current.cloned.add(resource["id"])
            relative = resource["mount_path"][len(SANDBOX_HOME) + 1 :]
            placement = repositories.Placement(sandbox.place.disk.workspace, relative, sandbox.place.disk.staging)
            self._materialize(resource, placement, sandbox.place.uid)

    def _materialize(self, resource: dict[str, Any], placement: repositories.Placement, owner_uid: int) -> bool:
        try:
            token = repositories.resource_token(workspace_id=self.setup.workspace_id, resource=resource)
            repositories.materialize(
                resource=resource,
                token=token,
                cache_root=self.backend.root / "repositories",
                place=placement,
                owner_uid=owner_uid,
            )
        except repositories.RepositoryError as failure:
            self.report(failure.error_type, f"{resource['url']}: {failure.message}")
            return False
        return True

    # -- memory around tool calls ----------------------------------------------------------------
    def before_tool(self) -> None:
        if self.current is not None:
            for mount in self.current.memory:
                mount.pull()

    def after_tool(self) -> SyncReport:
        report = SyncReport()
        if self.current is not None:
            for mount in self.current.memory:
                pushed = mount.push()
                report.stored += pushed.stored
                report.refused += pushed.refused
        return report


def _repositories(resources: list[dict[str, Any]], *, inside_workspace: bool) -> list[dict[str, Any]]:
    return [
        resource
        for resource in resources
        if resource["type"] == "github_repository"
        and resource["mount_path"].startswith(SANDBOX_HOME + "/") == inside_workspace
    ]
