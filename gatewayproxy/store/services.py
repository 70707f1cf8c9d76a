"""Writes of the database-backed config. Each validates the whole resulting document exactly as at boot
(building its snapshot with the caller's `build`), then changes the rows and bumps the version in one
transaction; an invalid write changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max

from gatewayproxy.config.loader import LoadedConfig
from gatewayproxy.state import GatewayState
from gatewayproxy.store import selectors
from gatewayproxy.store.document import (
    SINGLETON_SECTIONS,
    Build,
    EntryKey,
    built,
    entry_body,
    normalized,
    without_entry,
)
from gatewayproxy.store.models import (
    ROW_MODELS,
    ConfigVersion,
    Destination,
    OrderedEntry,
    PluginInstance,
    RateLimit,
    Route,
    Section,
    Vault,
)


@dataclass(frozen=True)
class StoredChange:
    """The outcome of a write: the new version, the snapshot validation built, and the stored body of the entry."""

    version: int
    state: GatewayState
    body: dict[str, Any] | None

    @property
    def loaded(self) -> LoadedConfig:
        """The validated config."""
        return self.state.loaded


def _locked_version() -> ConfigVersion:
    """The version row, locked: writers on every replica take turns here, each reading what the last wrote."""
    ConfigVersion.objects.get_or_create(pk=1)
    return ConfigVersion.objects.select_for_update().get(pk=1)


def _bump(version: ConfigVersion) -> int:
    version.number += 1
    version.save(update_fields=["number", "source", "updated_at"])
    return version.number


def _next_position(key: EntryKey) -> int:
    return int(selectors.collection_rows(key).aggregate(last=Max("position"))["last"] or 0) + 1


def _save_row(key: EntryKey, body: dict[str, Any], previous: EntryKey | None) -> None:
    existing = selectors.entry_rows(previous or key).first()
    if existing is None:
        fields: dict[str, Any] = {"name": key.name, "body": body}
        if key.collection in ("routes", "rate_limits", "plugins"):
            fields["position"] = _next_position(key)
        if key.collection == "plugins":
            fields["slot"] = key.slot
        ROW_MODELS[key.collection]._default_manager.create(**fields)
        return
    existing.name = key.name  # type: ignore[attr-defined]
    existing.body = body  # type: ignore[attr-defined]
    if key.collection == "plugins":
        existing.slot = key.slot  # type: ignore[attr-defined]
    existing.save()


@transaction.atomic
def config_entry_put(
    *, key: EntryKey, body: dict[str, Any], previous: EntryKey | None = None, build: Build | None = None
) -> StoredChange:
    """Upsert one entry (`previous`: the entry it renames or moves to another slot); raises `ConfigError`."""
    version = _locked_version()
    state = built(
        selectors.document_with_entry(key=key, body=body, previous=previous), source=version.source or None, build=build
    )
    stored = entry_body(normalized(state.loaded), key) or {}
    _save_row(key, stored, previous)
    return StoredChange(version=_bump(version), state=state, body=stored)


@transaction.atomic
def config_entry_delete(*, key: EntryKey, build: Build | None = None) -> StoredChange:
    """Remove one entry; raises `EntryMissing`, or `ConfigError` when the rest would be invalid."""
    version = _locked_version()
    state = built(without_entry(selectors.stored_document(), key), source=version.source or None, build=build)
    selectors.entry_rows(key).delete()
    return StoredChange(version=_bump(version), state=state, body=None)


def _insert_rows(document: dict[str, Any]) -> None:
    Section.objects.bulk_create(
        Section(name=name, body=document[name]) for name in SINGLETON_SECTIONS if name in document
    )
    Destination.objects.bulk_create(
        Destination(name=name, body=body) for name, body in document.get("destinations", {}).items()
    )
    _insert_ordered(Route, document.get("routes", []))
    _insert_ordered(RateLimit, document.get("rate_limits", []))
    Vault.objects.bulk_create(Vault(name=entry["name"], body=_unnamed(entry)) for entry in document.get("vaults", []))
    for slot, held in document.get("plugins", {}).items():
        entries = [held] if isinstance(held, dict) else held
        PluginInstance.objects.bulk_create(
            PluginInstance(slot=slot, name=entry["name"], position=index, body=_unnamed(entry))
            for index, entry in enumerate(entries)
        )


def _insert_ordered(model: type[OrderedEntry], entries: list[dict[str, Any]]) -> None:
    model._default_manager.bulk_create(
        model(name=entry["name"], position=index, body=_unnamed(entry)) for index, entry in enumerate(entries)
    )


def _unnamed(entry: dict[str, Any]) -> dict[str, Any]:
    return {field: value for field, value in entry.items() if field != "name"}


@transaction.atomic
def config_import(*, document: Any, source: str | None = None) -> StoredChange:
    """Replace the whole stored config with `document` (legacy form expanded), read from the file `source`;
    raises `ConfigError`."""
    state = built(document, source=source)
    version = _locked_version()
    version.source = source or ""
    for model in ROW_MODELS.values():
        model._default_manager.all().delete()
    _insert_rows(normalized(state.loaded))
    return StoredChange(version=_bump(version), state=state, body=None)
