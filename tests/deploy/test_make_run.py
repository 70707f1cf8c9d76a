"""`make run` (`manage.py up`) on a fresh data folder, with every port it binds moved by its flags: the
registry, the gateway's data and admin planes and the trigger scheduler's health server all answer on
the ports asked for, and the folder is made by the first start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.live import ROOT, free_port, wait_until_up

pytestmark = [pytest.mark.e2e]


def test_up_binds_the_ports_it_is_given_on_a_fresh_data_folder(tmp_path: Path) -> None:
    registry, gateway, admin, triggers = (free_port() for _ in range(4))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "REGISTRY_DATA_DIR": str(tmp_path / "var"),
        "REGISTRY_PORT": str(registry),
    }
    env.pop("REGISTRY_MODEL_BASE_URL", None)
    arguments = [
        f"--gateway-port={gateway}",
        f"--gateway-admin-port={admin}",
        "--sessions-health-port=off",
        f"--triggers-health-port={triggers}",
    ]
    up = subprocess.Popen(
        [sys.executable, "manage.py", "up", *arguments],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        for url in (
            f"http://127.0.0.1:{registry}/healthz",
            f"http://127.0.0.1:{admin}/healthz",
            f"http://127.0.0.1:{triggers}/healthz",
        ):
            wait_until_up(url, up, timeout=60)
        answer = httpx.post(f"http://127.0.0.1:{gateway}/v1/messages", json={}, timeout=5)
        assert answer.status_code in (400, 401, 404, 422), answer.text  # the gateway's data plane answered
        assert (tmp_path / "var" / "registry.sqlite3").exists()
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        output = up.communicate(timeout=30)[0].decode()
    assert f"Registry: http://127.0.0.1:{registry}" in output and f"Gateway: http://127.0.0.1:{gateway}" in output
