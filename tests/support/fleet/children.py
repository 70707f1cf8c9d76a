"""Pieces of the fleet test: child processes with log files, the ports a process listens on,
and a model that answers every session at once (`echo: <the user's words>`), holding a chosen turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from fakes import model as fake_model
from fakes.http_server import LoopbackHttpServer
from fakes.waiting import wait_until
from tests.support.live import ROOT

SLOW_PREFIX = "slow:"


class Child:
    """A subprocess of the fleet whose output goes to a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, command: list[str], *, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log = log_dir / f"{name}.log"
        with self.log.open("wb") as output:
            self.popen = subprocess.Popen(command, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 30) -> str:
        return f"--- {self.name}\n" + "\n".join(self.output().splitlines()[-lines:])

    def wait_for_line(self, text: str, timeout: float = 90) -> None:
        def logged() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited with {self.popen.returncode}\n{self.tail()}")
            return text in self.output()

        wait_until(logged, timeout=timeout, what=f"{self.name} to log {text!r}")

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye (a crashed host)."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def listening_ports(pid: int) -> set[int]:
    """The loopback TCP ports process `pid` listens on, read from /proc (a server told to bind port 0)."""
    inodes = set()
    for descriptor in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(descriptor)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def last_user_text(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "".join(block.get("text", "") for block in content or [] if block.get("type") == "text")
    return ""


class EchoModel(LoopbackHttpServer):
    """Vendor-B `POST /v1/messages` on loopback answering `echo: <last user text>` (JSON or SSE), for any number
    of sessions at once (serving once made). A text starting with `slow:` is held `slow_seconds` the first time
    it is asked, so a turn can be caught in flight; `asked` counts the requests per text."""

    def __init__(self, slow_seconds: float = 60.0) -> None:
        super().__init__(EchoHandler, name="echo-model")
        self.slow_seconds = slow_seconds
        self.asked: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.aborted = threading.Event()
        self.start()

    def count(self, said: str) -> int:
        """How many requests asked about `said`; the first `slow:` one is held."""
        with self.lock:
            self.asked[said] += 1
            return self.asked[said]

    def stop(self) -> None:
        self.aborted.set()
        super().stop()


class EchoHandler(fake_model.ModelHandler):
    """The scripted fake model's rendering (JSON and SSE), with the reply computed from the request."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        said = last_user_text(body)
        model: EchoModel = self.owner
        asked = model.count(said)
        try:
            if said.startswith(SLOW_PREFIX) and asked == 1 and model.aborted.wait(model.slow_seconds):
                return
            self.answer(fake_model.text(f"echo: {said}"), body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller went away (a killed worker or gateway)
