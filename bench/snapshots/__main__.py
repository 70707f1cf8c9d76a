"""`python -m bench.snapshots`: workspace snapshots (issue 24) of a 26 MB workspace of mixed files (1,600
source files and 3 MB that does not compress; about 7 MB as gzip -6, 8 MB as gzip -1).

- backend: through the bubblewrap backend's API in this process (what the runtime calls), a full
  snapshot (a new base) against a snapshot after one file changed (an increment of the chain), and the
  restore of a base and its increments on a new worker;
- runtime: through a `runsessions` worker and its real sandbox, turns that change one file (the first
  makes the workspace): how long after the turn's last event `session.status_idle` is written, and when
  the snapshot landed after it (the worker releases the session's lease then).

Writes RESULTS.md beside this file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import machine_description, recreate_database, runsessions, setup_django
from fakes import model as replies
from fakes.model import FakeModel

RESULTS_FILE = Path(__file__).with_name("RESULTS.md")
DATABASE_NAME = "registry_bench_snapshots"
# Run in the sandbox: the workspace. Each source file repeats lines of its own small pool, as code does.
MAKE_WORKSPACE = """
import os, random
rng = random.Random(24)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 10))) for _ in range(3000)]
for package in range(40):
    os.makedirs(f"src/pkg{package}", exist_ok=True)
    for module in range(40):
        pool = ["    " * rng.randint(0, 3) + " ".join(rng.choices(words, k=rng.randint(2, 8))) for _ in range(55)]
        lines, size = [], 0
        while size < 14_000:
            lines.append(f"{rng.choice(pool)}({rng.randint(0, 99)})\\n")
            size += len(lines[-1])
        with open(f"src/pkg{package}/module{module}.py", "w") as source:
            source.write("".join(lines))
os.makedirs("assets", exist_ok=True)
for index in range(3):
    with open(f"assets/blob{index}.bin", "wb") as blob:
        blob.write(rng.randbytes(1 << 20))
"""
MAKE_COMMAND = f"python3 - <<'EOF'\n{MAKE_WORKSPACE}EOF\ndu -sb --apparent-size . | cut -f1"


def change_one_file(step: int) -> str:
    return f"echo 'changed = {step}' >> src/pkg{step % 40}/module{step % 40}.py"


def timed_ms(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def backend_figures(root: Path, rounds: int, increments: int) -> dict[str, Any]:
    """Full and one-file snapshots, `rounds` chains of a base and `increments` increments; the last chain's
    restore on a new worker."""
    from registry.sandbox import snapshots
    from registry.sandbox.backend import BwrapBackend, Limits, SandboxSpec

    limits = Limits(2048, 256, 10240, 30000, 120_000)
    backend = BwrapBackend(root / "here", limits)
    spec = SandboxSpec(session_id="sesn_bench_snapshots", workspace_id="wsp")
    box = backend.ensure(spec)
    megabytes = int(box.run(MAKE_COMMAND).output.split()[0]) / 1e6
    full, one_file = [], []
    for round_ in range(rounds):
        box.local.restored(None)  # forget where this host stands in the chain: the next snapshot is a base
        full.append(timed_ms(box.snapshot))
        for step in range(increments):
            box.run(change_one_file(round_ * increments + step))
            one_file.append(timed_ms(box.snapshot))
    chain = snapshots.latest(spec.session_id)
    assert chain is not None and len(chain.archives) == increments + 1
    elsewhere = BwrapBackend(root / "elsewhere", limits)
    restore = timed_ms(lambda: elsewhere.ensure(spec))
    assert elsewhere.ensure(spec).run("cat src/pkg1/module1.py | tail -1").output.startswith("changed = ")
    elsewhere.destroy(spec.session_id)
    backend.destroy(spec.session_id, forget=True)
    return {
        "workspace_mb": megabytes,
        "disks": "images" if backend.host.uses_images else "folders",
        "full": full,
        "one_file": one_file,
        "base_bytes": chain.sizes[0],
        "increment_bytes": statistics.median(chain.sizes[1:]),
        "restore": restore,
    }


def seed_session() -> str:
    """A session of an agent with the built-in tools."""
    from registry.agents.services import agent_create
    from registry.environments.services import environment_create
    from registry.sessions.services import session_create
    from registry.workspaces.services import workspace_create

    workspace, _ = workspace_create(name="bench")
    toolset = {"type": "agent_toolset_20260401", "configs": []}
    agent = agent_create(workspace=workspace, values={"name": "bench", "model": "m", "tools": [toolset]})
    environment = environment_create(workspace=workspace, values={"name": "bench"})
    values = {"agent": {"id": agent.id}, "environment_id": environment.id}
    return str(session_create(workspace=workspace, values=values).id)


def turn(session_id: str, model: FakeModel, command: str, number: int) -> tuple[float, float]:
    """One turn running `command` in the sandbox: (ms from its last message to its idle status, ms from the
    idle status to the lease's release, that is the snapshot landed)."""
    from django.db import connection

    from registry.sessions.models import Session, SessionEvent
    from registry.sessions.services import events_append

    model.add(replies.tool_call("bash", {"command": command}), replies.text("done"))
    message = {"type": "user.message", "content": [{"type": "text", "text": "go"}]}
    events_append(session_id=session_id, events=[message])
    idle_events = SessionEvent.objects.filter(session_id=session_id, type="session.status_idle")
    deadline = time.monotonic() + 120
    while idle_events.count() < number:
        if time.monotonic() > deadline:
            raise RuntimeError("the turn did not end in time")
        time.sleep(0.005)
    while Session.objects.filter(pk=session_id, lease_owner__isnull=False).exists():
        time.sleep(0.005)
    released = time.time()
    idle = idle_events.order_by("-seq").values_list("processed_at", flat=True)[0]
    said = SessionEvent.objects.filter(session_id=session_id, type="agent.message").order_by("-seq")[0].processed_at
    connection.close()
    return (idle - said).total_seconds() * 1000, (released - idle.timestamp()) * 1000


def runtime_figures(root: Path, turns: int) -> dict[str, Any]:
    database_url = recreate_database(DATABASE_NAME)
    setup_django(database_url)
    session_id = seed_session()
    model = FakeModel()
    environment = {"REGISTRY_SANDBOX_ROOT": str(root / "worker"), "REGISTRY_DATA_DIR": os.environ["REGISTRY_DATA_DIR"]}
    try:
        with runsessions(database_url, model.url, 4, **environment):
            first = turn(session_id, model, MAKE_COMMAND, 1)
            later = [turn(session_id, model, change_one_file(step), step + 2) for step in range(turns)]
    finally:
        model.stop()
    return {"first": first, "gaps": [gap for gap, _ in later], "landed": [landed for _, landed in later]}


def row(figure: str, values: list[float], digits: int = 0) -> str:
    low, middle, high = min(values), statistics.median(values), max(values)
    return f"| {figure} | {middle:.{digits}f} | {low:.{digits}f} / {high:.{digits}f} | {len(values)} |"


def report(backend: dict[str, Any], runtime: dict[str, Any]) -> str:
    increments = len(backend["one_file"]) // len(backend["full"])
    first_gap, first_landed = runtime["first"]
    return "\n".join(
        [
            "# Snapshot benchmark (issue 24)",
            "",
            *machine_description(),
            f"- Workspace: {backend['workspace_mb']:.1f} MB (1,600 source files, 3 MB of random bytes); bubblewrap "
            f"backend, disks: {backend['disks']}; storage: the default FileSystemStorage",
            "",
            "| figure | median ms | min / max ms | runs |",
            "|---|---|---|---|",
            row(f"full snapshot (a new base, {backend['base_bytes'] / 1e6:.1f} MB stored)", backend["full"]),
            row(f"one file changed (an increment, {backend['increment_bytes'] / 1e3:.1f} KB)", backend["one_file"]),
            row(f"restore of a base + {increments} increments on a new worker (new disk)", [backend["restore"]]),
            row("runtime: last `agent.message` -> `session.status_idle`, one file changed", runtime["gaps"], 1),
            row("runtime: `session.status_idle` -> snapshot landed, one file changed", runtime["landed"]),
            row("runtime, first turn (makes the workspace, a full base): message -> idle", [first_gap], 1),
            row("runtime, first turn: idle -> snapshot landed", [first_landed]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="chains of a base and its increments")
    parser.add_argument("--increments", type=int, default=10, help="one-file increments per chain")
    parser.add_argument("--turns", type=int, default=20, help="one-file turns through the runtime")
    arguments = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-snapshots-", dir="/tmp"))
    os.chmod(root, 0o711)  # every session uid passes through it
    os.environ["REGISTRY_DATA_DIR"] = str(root / "data")
    from registry.sandbox.disks import release_root

    try:
        runtime = runtime_figures(root, arguments.turns)  # sets Django up on the bench database
        backend = backend_figures(root, arguments.rounds, arguments.increments)
    finally:
        release_root(root)
        shutil.rmtree(root, ignore_errors=True)
    text = report(backend, runtime)
    RESULTS_FILE.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
