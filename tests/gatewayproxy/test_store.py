"""The database-backed config: rows to document and back, the `gateway import`/`export` command, writes that
validate the whole document, and `manage.py rungateway --database` serving what was imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.core.management import CommandError, call_command

from fakes.waiting import wait_until
from gatewayproxy.config.loader import ConfigError
from gatewayproxy.store import selectors, services
from gatewayproxy.store.document import EntryKey, EntryMissing
from gatewayproxy.store.source import read_validated
from tests.support import live
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.store import import_document, provider_document
from tests.support.gateway.thread import wait_ready

PROJECT = Path(__file__).resolve().parents[2]


def full_document(provider: FakeProvider) -> dict[str, Any]:
    return provider_document(
        provider,
        identity={"scope_dims": ["team"]},
        spend={"key_dims": ["team"]},
        rate_limits=[
            {"name": "red", "match": {"scope": {"team": "red"}}, "qpm": 10},
            {"name": "blue", "match": {"scope": {"team": "blue"}}, "qpm": 20},
        ],
        plugins={"rate_limiter": {"name": "local", "kind": "token_bucket_local"}},
        guardrails_policy={"mode": "off"},
    )


def test_import_stores_rows_that_rebuild_the_document(
    db: None, tmp_path: Path, primary: FakeProvider, capsys: pytest.CaptureFixture[str]
) -> None:
    document = full_document(primary)
    import_document(tmp_path, document)
    assert selectors.stored_document() == document
    assert selectors.config_version() == 1
    assert [row.name for row in services.RateLimit.objects.all()] == ["red", "blue"]
    capsys.readouterr()
    call_command("gateway", "export")
    assert yaml.safe_load(capsys.readouterr().out) == document


def test_relative_paths_are_stored_resolved(db: None, tmp_path: Path, primary: FakeProvider) -> None:
    (tmp_path / "vault.yaml").write_text(yaml.safe_dump({"v": "secret"}))
    import_document(
        tmp_path, provider_document(primary, vaults=[{"name": "v", "resolver": "static_file", "file": "vault.yaml"}])
    )
    assert selectors.stored_document()["vaults"] == [
        {"name": "v", "resolver": "static_file", "file": str(tmp_path / "vault.yaml")}
    ]


def test_plugin_paths_resolve_against_the_imported_file(db: None, tmp_path: Path, primary: FakeProvider) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"rules": [{"name": "everyone", "principal": "*"}]}))
    acl = {"name": "acl", "kind": "yaml_acl", "file": "rules.yaml"}
    document = provider_document(primary, plugins={"authorizers": [acl]})
    with pytest.raises(ConfigError, match=r"plugins\.authorizers\[0\]\.file"):
        services.config_import(document=document)  # no file to be relative to
    import_document(tmp_path, document)
    assert selectors.config_source() == str(tmp_path / "gateway.yaml")
    assert read_validated().loaded.config.plugins.authorizers[0].name == "acl"
    change = services.config_entry_put(
        key=EntryKey("plugins", "acl2", "authorizers"), body={"kind": "yaml_acl", "file": "rules.yaml"}
    )
    assert [plugin.name for plugin in change.loaded.config.plugins.authorizers] == ["acl", "acl2"]


def test_a_bad_file_changes_nothing_and_names_the_key(db: None, tmp_path: Path, primary: FakeProvider) -> None:
    import_document(tmp_path, provider_document(primary))
    before = selectors.stored_config()
    bad = provider_document(
        primary, routes=[{"name": "r", "strategy": {"mode": "fallback", "targets": [{"destination": "nowhere"}]}}]
    )
    with pytest.raises(CommandError, match=r"routes\[0\]\.strategy\.targets\[0\]\.destination"):
        import_document(tmp_path, bad)
    assert selectors.stored_config() == before


def test_entry_writes_validate_the_whole_document(db: None, tmp_path: Path, primary: FakeProvider) -> None:
    import_document(tmp_path, provider_document(primary))
    route = {"match": {"model": "gpt-*"}, "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}
    change = services.config_entry_put(key=EntryKey("routes", "gpt"), body=route)
    assert change.version == 2 and [r.name for r in change.loaded.config.routes] == ["all", "gpt"]
    with pytest.raises(ConfigError, match=r"destinations\.one: still referenced by route 'all', 'gpt'"):
        services.config_entry_delete(key=EntryKey("destinations", "one"))
    with pytest.raises(EntryMissing):
        services.config_entry_delete(key=EntryKey("routes", "missing"))
    with pytest.raises(ConfigError, match=r"rate_limiter: unsupported kind 'nope'"):
        services.config_entry_put(key=EntryKey("plugins", "x", "rate_limiter"), body={"kind": "nope"})
    assert selectors.config_version() == 2
    services.config_entry_delete(key=EntryKey("routes", "all"))
    assert [route["name"] for route in selectors.stored_document()["routes"]] == ["gpt"]


def test_rungateway_database_workers_serve_and_converge(
    transactional_db: None, tmp_path: Path, primary: FakeProvider
) -> None:
    listen, admin = f"127.0.0.1:{live.free_port()}", f"127.0.0.1:{live.free_port()}"
    document = provider_document(primary, server={"listen": listen, "admin_listen": admin})
    document["routes"][0]["match"] = {"model": "m"}
    import_document(tmp_path, document)
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings.base", "DATABASE_URL": live.test_database_url()}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "rungateway", "--database", "--workers", "2"],
        cwd=PROJECT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def status_of(model: str) -> int:
        with httpx.Client() as fresh:  # a new connection, so either worker may take it
            return fresh.post(f"http://{listen}/v1/chat/completions", json={"model": model, "messages": []}).status_code

    try:
        wait_ready(f"http://{admin}", process, timeout=30)
        assert status_of("m") == 200 and status_of("other") == 404
        route = {"match": {"model": "other"}, "strategy": {"mode": "fallback", "targets": [{"destination": "one"}]}}
        written = httpx.put(f"http://{admin}/admin/v1/routes/other", json=route)  # reaches one of the workers
        assert written.status_code == 200, written.text
        assert selectors.config_version() == 2
        wait_until(
            lambda: all(status_of("other") == 200 for _ in range(10)), timeout=10, what="every worker to serve v2"
        )
    finally:
        live.stop(process)
        output = process.communicate()[0].decode()
    assert process.returncode == 0, output
