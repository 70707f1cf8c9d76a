"""`python -m bench [NAME ...]`: run the benchmarks (all of them by default), one module at a time.

Each writes its own RESULTS.md; bench/README.md collects the figures.
"""

from __future__ import annotations

import subprocess
import sys

BENCHMARKS = (
    "registry",
    "sessions",
    "runtime",
    "sandbox",
    "snapshots",
    "resources",
    "gateway",
    "fleet",
    "work",
    "threads",
    "webhooks",
)


def main() -> None:
    chosen = sys.argv[1:] or list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    for name in chosen:
        print(f"== bench.{name}", flush=True)
        subprocess.run([sys.executable, "-m", f"bench.{name}"], check=True)


if __name__ == "__main__":
    main()
