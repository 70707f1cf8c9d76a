"""What worker processes (`--workers N`) share: a private run directory made before they fork, holding the
metrics files every worker writes (prometheus-client's multiprocess mode, so any worker's `/metrics` answers for
all of them) and the Unix sockets through which a worker reaches a sibling (an MCP-over-SSE message POST that
landed on a worker other than the one holding its stream). A single-process gateway has no worker set."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

from gatewayproxy.metrics import enable_multiprocess, process_exited

_current: Worker | None = None


@dataclass(frozen=True)
class Worker:
    """This process's place in the worker set."""

    index: int
    count: int
    run_dir: str

    def socket_path(self, index: int) -> str:
        """Where worker `index` accepts requests from its siblings."""
        return os.path.join(self.run_dir, f"worker-{index}.sock")


def current() -> Worker | None:
    """This process's worker, when it is one of several."""
    return _current


class WorkerSet:
    """Made by the parent before it forks; each child enters its slot; the parent reaps and cleans up."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.run_dir = tempfile.mkdtemp(prefix="gateway-workers-")
        os.chmod(self.run_dir, 0o700)
        self.metrics_dir = os.path.join(self.run_dir, "metrics")
        os.mkdir(self.metrics_dir)

    def enter(self, index: int) -> Worker:
        """In the forked child: become worker `index` (metrics go to the shared files from now on)."""
        global _current
        enable_multiprocess(self.metrics_dir)
        _current = Worker(index, self.count, self.run_dir)
        return _current

    def exited(self, pid: int) -> None:
        """A worker ended: its live gauges leave the totals."""
        process_exited(pid, self.metrics_dir)

    def close(self) -> None:
        """Every worker ended: remove the run directory."""
        shutil.rmtree(self.run_dir, ignore_errors=True)
