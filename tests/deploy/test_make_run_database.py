"""`make run` (`manage.py up`) without `--gateway-config` serves the gateway from the database: demo.yaml is
imported into the empty store on first start (its listeners moved to the ports given), a change written
through the store services (as the admin's pages write) reaches the running gateway, and a restart keeps the
stored config instead of importing the file again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.waiting import wait_until
from tests.deploy.test_make_run import Running, make_run
from tests.support.live import ROOT

pytestmark = [pytest.mark.e2e]

# An admin-style write: a second route through the store services, as the admin's save does.
ADD_ROUTE = """
import django
django.setup()
from gatewayproxy.store import services
from gatewayproxy.store.document import EntryKey
body = {"match": {"model": "edited-*"}, "strategy": {"mode": "fallback", "targets": [{"destination": "vendor_b"}]}}
services.config_entry_put(key=EntryKey("routes", "edited-in-admin"), body=body, by=services.Provenance("admin"))
"""


def stored_config(running: Running) -> dict[str, Any]:
    answer = httpx.get(f"http://127.0.0.1:{running.admin}/admin/v1/config", timeout=5)
    assert answer.status_code == 200, answer.text
    config: dict[str, Any] = answer.json()
    return config


def route_names(running: Running) -> list[str]:
    return [route["name"] for route in stored_config(running).get("routes", [])]


def write_through_the_store(data: Path) -> None:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings.base",
        "DATABASE_URL": "",
        "REDIS_URL": "",
        "REGISTRY_DATA_DIR": str(data),
        "VAULT__DEMO__VENDOR_B": "placeholder",
    }
    done = subprocess.run(
        [sys.executable, "-c", ADD_ROUTE], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_admin_change_reaches_the_gateway_up_started_from_the_database(tmp_path: Path) -> None:
    data = tmp_path / "var"
    with make_run(data) as running:
        running.wait_up()
        assert route_names(running) == ["everything-to-vendor-b"]
        assert stored_config(running)["server"]["listen"] == f"127.0.0.1:{running.gateway}"
        write_through_the_store(data)
        wait_until(
            lambda: "edited-in-admin" in route_names(running), timeout=30, what="the edited route served"
        )  # fmt: skip
        assert "Gateway config: the database" in running.output()
    with make_run(data) as restarted:  # new ports, same data folder: the stored config stays
        restarted.wait_up()
        assert route_names(restarted) == ["everything-to-vendor-b", "edited-in-admin"]
        assert stored_config(restarted)["server"]["admin_listen"] == f"127.0.0.1:{restarted.admin}"
