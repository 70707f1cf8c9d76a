"""A test module's cases run again in a child pytest whose database is SQLite (the suite's own run is the
PostgreSQL half): the modules whose code has a PostgreSQL path and a SQLite one call `rerun_on_sqlite`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rerun_on_sqlite(module: str, tmp_path: Path, *, selection: str, passed: int) -> None:
    """Run the cases of `module` that `selection` (a `-k` expression) picks on SQLite; all `passed` must pass."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'registry.sqlite3'}",
        "REGISTRY_TEST_DB_NAME": str(tmp_path / "test.sqlite3"),
    }
    child = subprocess.run(
        [sys.executable, "-m", "pytest", module, "-q", "-k", selection, "-p", "no:randomly"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
    assert f"{passed} passed" in child.stdout, child.stdout[-2000:]
