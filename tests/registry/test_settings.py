"""Production settings pass `manage.py check --deploy` with zero warnings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_check_deploy_is_clean():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings.production",
        "SECRET_KEY": "x7!" * 20 + "long-random-production-secret",
        "ALLOWED_HOSTS": "registry.example.com",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_production_refuses_missing_secret_key():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings.production", "SECRET_KEY": ""}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
