"""`python -m bench.sandbox`: sandbox cold start and warm round trip, 50 concurrent sessions, and
snapshot + restore of a 50 MB workspace, measured from the runtime's side (the backend's API).

Writes RESULTS.md beside this file.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.common import machine_description

RESULTS_FILE = Path(__file__).with_name("RESULTS.md")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
    root = Path(tempfile.mkdtemp(prefix="bench-sandboxes-", dir="/tmp"))
    os.chmod(root, 0o711)
    os.environ["REGISTRY_DATA_DIR"] = str(root / "data")
    import django

    django.setup()
    from registry.sandbox.backend import BwrapBackend, Limits, SandboxSpec
    from registry.sandbox.disks import release_root
    from registry.sandbox.toolset import run_tool

    backend = BwrapBackend(root, Limits(2048, 256, 10240, 30000, 120_000))
    cold, fresh_shell, warm = [], [], []
    for index in range(30):
        started = time.perf_counter()
        box = backend.ensure(SandboxSpec(session_id=f"sesn_cold{index}", workspace_id="wsp"))
        box.run("true")
        cold.append((time.perf_counter() - started) * 1000)
    box = backend.ensure(SandboxSpec(session_id="sesn_cold0", workspace_id="wsp"))
    for _ in range(30):
        started = time.perf_counter()
        box.run("true", restart=True)
        fresh_shell.append((time.perf_counter() - started) * 1000)
    for _ in range(300):
        started = time.perf_counter()
        box.run("true")
        warm.append((time.perf_counter() - started) * 1000)
    box.run("echo hello > hello.txt")
    reads = []
    for _ in range(30):
        started = time.perf_counter()
        run_tool(box, "read", {"file_path": "hello.txt"})
        reads.append((time.perf_counter() - started) * 1000)

    failures: list[str] = []

    def loop(index: int) -> None:
        sandbox = backend.ensure(SandboxSpec(session_id=f"sesn_many{index}", workspace_id="wsp"))
        for step in range(20):
            result = sandbox.run(f"echo {index}-{step} > f; cat f")
            if result.output.strip() != f"{index}-{step}" or result.exit_code != 0:
                failures.append(f"{index}/{step}: {result}")

    started = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(index,)) for index in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    many_seconds = time.perf_counter() - started

    big = backend.ensure(SandboxSpec(session_id="sesn_big", workspace_id="wsp"))
    big.run("head -c 25000000 /dev/urandom > random.bin; yes 'some text' | head -c 25000000 > text.txt")
    started = time.perf_counter()
    big.snapshot()
    snapshot_seconds = time.perf_counter() - started
    elsewhere = BwrapBackend(root / "elsewhere", backend.limits)
    started = time.perf_counter()
    elsewhere.ensure(SandboxSpec(session_id="sesn_big", workspace_id="wsp"))  # a new disk, then the restore
    restore_seconds = time.perf_counter() - started
    for session_id in list(backend.sandboxes):
        backend.destroy(session_id, forget=True)
    elsewhere.destroy("sesn_big")
    release_root(root)
    shutil.rmtree(root, ignore_errors=True)

    report = "\n".join(
        [
            "# Sandbox benchmark",
            "",
            *machine_description(),
            "- bubblewrap backend, measured through its API in one process (what the runtime calls); "
            f"disks: {'images' if backend.host.uses_images else 'folders'}, cgroups: {backend.host.cgroups.kind}",
            "",
            "| figure | p50 ms | p99 / max ms |",
            "|---|---|---|",
            f"| cold start: new sandbox (disk, cgroup, proxy) + first `true` (30) | {statistics.median(cold):.1f} | "
            f"{max(cold):.1f} |",
            f"| new shell + first `true` (`restart`, 30) | {statistics.median(fresh_shell):.1f} | "
            f"{max(fresh_shell):.1f} |",
            f"| `read` tool call (30) | {statistics.median(reads):.1f} | {max(reads):.1f} |",
            f"| warm `bash` round trip `true` (300) | {statistics.median(warm):.2f} | "
            f"{statistics.quantiles(warm, n=100)[98]:.2f} |",
            "",
            f"50 concurrent sessions x 20 commands: {many_seconds:.1f} s, {len(failures)} failures.",
            "",
            f"50 MB workspace (25 MB random, 25 MB text): snapshot {snapshot_seconds:.2f} s, "
            f"restore on a new worker (a new disk included) {restore_seconds:.2f} s, together "
            f"{snapshot_seconds + restore_seconds:.2f} s.",
        ]
    )
    RESULTS_FILE.write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
