"""Attacks a hostile sandbox mounts on the host's operations, shared by the tests that run them: a host
secret out of every sandbox's reach, and a swapper that flips folders and links in a loop."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.waiting import wait_until
from registry.sandbox.backend import BwrapSandbox

RACE_SECONDS = 120
# Runs in the sandbox: exchange each `d<n>` (a real folder) with `l<n>` (a link to the host's secret
# folder) forever, so a host-side walker that checks one and then enters the other gets the host's.
SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(sys.argv[1])
pairs = [(f"d{n}", f"l{n}") for n in range(int(sys.argv[3]))]
for real, link in pairs:
    os.makedirs(real, exist_ok=True)
    open(os.path.join(real, "decoy.txt"), "w").write("decoy")
    if not os.path.lexists(link):
        os.symlink(sys.argv[2], link)
names = [(real.encode(), link.encode()) for real, link in pairs]
while True:
    for real, link in names:
        libc.renameat2(-100, real, -100, link, 2)
"""


@pytest.fixture
def host_secret() -> Iterator[tuple[Path, str]]:
    """A root-only folder of the host with a secret in it, outside any sandbox."""
    folder = Path(tempfile.mkdtemp(prefix="host-secret-", dir="/tmp"))
    os.chmod(folder, 0o700)
    secret = "host-secret-" + os.urandom(12).hex()
    (folder / "secret.txt").write_text(secret)
    yield folder, secret
    shutil.rmtree(folder)


def start_swapper(box: BwrapSandbox, target: str, *, pairs: int = 8, under: str = "/workspace/tree") -> None:
    box.run(f"mkdir -p {under} && cat > /tmp/swap.py <<'EOF'\n{SWAPPER}\nEOF")
    box.run(f"nohup python3 /tmp/swap.py {under} {target} {pairs} >/dev/null 2>&1 &")
    ready = f"ls {under} | wc -l; pgrep -f swap.py | wc -l"
    wait_until(lambda: box.run(ready).output.split() == [str(2 * pairs), "1"], what="the swapper to run")
