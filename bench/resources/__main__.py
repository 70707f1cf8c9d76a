"""`python -m bench.resources`: what a session brings into its sandbox, timed from the runtime's side.

- first tool call: a new session with one file, one skill, one memory store of 1,000 memories and a
  repository already in the worker's cache (served by a git server on loopback, reached through an
  `insteadOf` mirror) -> provisioning (staging, the memory folder, the clone copy, the sandbox) and a
  first `read` of the repository's README, as the runtime runs it;
- memory write: a `write` into the memory folder from the sandbox, then the sync after the call ->
  the memory readable through the store (what the API reads).

PostgreSQL; writes RESULTS.md beside this file.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import machine_description, recreate_database, setup_django
from fakes.git_server import GitServer

DATABASE_NAME = "registry_bench_resources"
RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
SESSIONS = 20
WRITES = 100
TOKEN = "bench-token"
MANIFEST = b"---\nname: bench-skill\ndescription: A skill for the benchmark.\n---\nDo the thing.\n"


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-resources-", dir="/tmp"))
    os.chmod(root, 0o711)
    server = GitServer(token=TOKEN)
    repository = server.create_repository("tool")
    repository.commit({"README.md": "hello from the repository\n"})
    config = root / "gitconfig"
    config.write_text(f'[url "{server.url}/"]\n\tinsteadOf = https://bench.example/\n')
    os.environ.update(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1", REGISTRY_DATA_DIR=str(root / "data"))
    setup_django(recreate_database(DATABASE_NAME))
    try:
        first_calls, writes = measure(root)
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    report(first_calls, writes)


def measure(root: Path) -> tuple[list[float], list[float]]:
    from registry.agents.services import agent_create
    from registry.environments.services import environment_create
    from registry.files.services import file_upload
    from registry.memory.models import Memory
    from registry.memory.services import memory_store_create, sha256_of
    from registry.runtime.provision import Provisioner, SessionSetup
    from registry.sandbox.backend import BwrapBackend, Limits
    from registry.sandbox.egress import NetworkPolicy
    from registry.sandbox.toolset import run_tool
    from registry.sessions.services import session_create
    from registry.skills.bundles import parse_bundle
    from registry.skills.services import skill_create
    from registry.workspaces.services import workspace_create

    workspace, _ = workspace_create(name="bench")
    upload = file_upload(workspace=workspace, part=part("data.txt", b"x" * 10_000), expires_in_seconds=None)
    bundle = parse_bundle([part("bench-skill/SKILL.md", MANIFEST)])
    skill = skill_create(workspace=workspace, bundle=bundle, display_name=None)
    store = memory_store_create(workspace=workspace, values={"name": "notes"})
    Memory.objects.bulk_create(
        Memory(
            store=store,
            path=f"/m/{n:04d}.md",
            content=f"memory {n}",
            content_sha256=sha256_of(f"memory {n}"),
            content_size_bytes=len(f"memory {n}"),
            version_id="memver_seed",
        )
        for n in range(1000)
    )
    agent_values = {
        "name": "bench",
        "model": "claude-sonnet-4-5",
        "tools": [{"type": "agent_toolset_20260401"}],
        "skills": [{"type": "custom", "skill_id": skill.id}],
    }
    agent = agent_create(workspace=workspace, values=agent_values)
    environment = environment_create(workspace=workspace, values={"name": "bench"})
    resources = [
        {"type": "file", "file_id": upload.id},
        {"type": "memory_store", "memory_store_id": store.id},
        {"type": "github_repository", "url": "https://bench.example/tool", "authorization_token": TOKEN},
    ]
    backend = BwrapBackend(root / "sandboxes", Limits(2048, 256, 10240, 30000, 120_000))

    def provisioner_for(session_id: str) -> Provisioner:
        setup = SessionSetup(
            session_id=session_id,
            workspace_id=workspace.id,
            agent=agent.spec,
            environment_id=environment.id,
            environment_config=environment.config,
            vault_ids=[],
            network=NetworkPolicy(),
        )
        return Provisioner(setup, backend, lambda kind, message: print("session.error", kind, message))

    def new_session() -> tuple[Provisioner, list[dict]]:
        values = {"agent": {"id": agent.id}, "environment_id": environment.id, "resources": resources}
        session = session_create(workspace=workspace, values=values)
        return provisioner_for(session.id), session.resources

    warm, warm_resources = new_session()  # fills the worker's caches: repository, skill
    run_tool(warm.sandbox(warm_resources), "read", {"file_path": "/workspace/tool/README.md"})
    first_calls = []
    for _ in range(SESSIONS):
        provisioner, session_resources = new_session()
        started = time.perf_counter()
        sandbox = provisioner.sandbox(session_resources)
        provisioner.before_tool()
        outcome = run_tool(sandbox, "read", {"file_path": "/workspace/tool/README.md"})
        provisioner.after_tool()
        first_calls.append((time.perf_counter() - started) * 1000)
        assert "hello from the repository" in outcome.content[0]["text"], outcome
    writes = []
    sandbox = warm.sandbox(warm_resources)
    for n in range(WRITES):
        started = time.perf_counter()
        warm.before_tool()
        run_tool(sandbox, "write", {"file_path": f"/mnt/memory/notes/new/{n}.md", "content": f"note {n}"})
        warm.after_tool()
        assert Memory.objects.filter(store=store, path=f"/new/{n}.md").exists()
        writes.append((time.perf_counter() - started) * 1000)
    for session_id in list(backend.sandboxes):
        backend.destroy(session_id, forget=True)
    return first_calls, writes


def part(path: str, data: bytes):  # type: ignore[no-untyped-def]
    """An uploaded part as the API's upload handler makes it."""
    from registry.core.uploads import UploadedPart

    made = UploadedPart(path, content_type="text/plain", size=len(data), charset=None)
    made.write(data)
    made.seek(0)
    return made


def report(first_calls: list[float], writes: list[float]) -> None:
    lines = [
        "# Session resources benchmark",
        "",
        *machine_description(),
        "- measured in one process through the runtime's provisioner and toolset (what a worker runs)",
        "",
        "| figure | p50 ms | max ms |",
        "|---|---|---|",
        f"| first tool call of a new session: 1 file, 1 skill, 1,000 memories, cached repository ({SESSIONS}) "
        f"| {statistics.median(first_calls):.0f} | {max(first_calls):.0f} |",
        f"| memory `write` in the sandbox -> stored, readable through the API ({WRITES}) "
        f"| {statistics.median(writes):.0f} | {max(writes):.0f} |",
    ]
    RESULTS_FILE.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
