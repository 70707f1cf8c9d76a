"""Writes of the database-backed config. Each validates the whole resulting document exactly as at boot
(building its snapshot with the caller's `build`), then changes the rows, records a revision of every entry
it changed (`ConfigRevision`: who, how, before and after) and bumps the version in one transaction; an
invalid write changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Max

from gatewayproxy.config.loader import LoadedConfig, load_config_file
from gatewayproxy.state import GatewayState
from gatewayproxy.store import selectors
from gatewayproxy.store.document import (
    SINGLETON_SECTIONS,
    Build,
    EntryKey,
    built,
    entry_body,
    entry_keys,
    normalized,
    without_entry,
)
from gatewayproxy.store.models import (
    ROW_MODELS,
    ConfigRevision,
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
class Provenance:
    """Who made a write (`user`: a Django user, or None) and how (`origin`), as its revisions record it."""

    origin: str = "admin plane"
    user: Any = None


ADMIN_PLANE = Provenance()
IMPORT = Provenance(origin="import")


@dataclass(frozen=True)
class StoredChange:
    """The outcome of a write: the new version, the snapshot validation built, the stored body of the entry,
    and the revision recorded for it (None when the write left it as it was)."""

    version: int
    state: GatewayState
    body: dict[str, Any] | None
    revision: ConfigRevision | None = None

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


def _record(
    before: dict[str, Any], after: dict[str, Any], keys: list[EntryKey], version: int, by: Provenance
) -> list[ConfigRevision]:
    """A revision of each of `keys` whose body differs between the documents `before` and `after`."""
    user = by.user if getattr(by.user, "pk", None) is not None else None
    revisions = [
        ConfigRevision(
            author=user,
            author_name=user.get_username() if user is not None else "",
            origin=by.origin,
            collection=key.collection,
            slot=key.slot or "",
            name=key.name,
            before=entry_body(before, key),
            after=entry_body(after, key),
            version=version,
        )
        for key in dict.fromkeys(keys)
        if entry_body(before, key) != entry_body(after, key)
    ]
    for revision in revisions:
        revision.save()
    return revisions


def _changed(
    before: dict[str, Any], version: ConfigVersion, state: GatewayState, keys: list[EntryKey], by: Provenance
) -> StoredChange:
    """Bump the version, record the revisions of `keys` (the first one's is the change's) and say so."""
    number = _bump(version)
    revisions = _record(before, selectors.stored_document(), keys, number, by)
    first = next((revision for revision in revisions if revision.key == keys[0]), None) if keys else None
    body = entry_body(normalized(state.loaded), keys[0]) if keys else None
    return StoredChange(version=number, state=state, body=body, revision=first)


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
    *,
    key: EntryKey,
    body: dict[str, Any],
    previous: EntryKey | None = None,
    build: Build | None = None,
    by: Provenance = ADMIN_PLANE,
) -> StoredChange:
    """Upsert one entry (`previous`: the entry it renames or moves to another slot); raises `ConfigError`."""
    version = _locked_version()
    before = selectors.stored_document()
    state = built(
        selectors.document_with_entry(key=key, body=body, previous=previous), source=version.source or None, build=build
    )
    _save_row(key, entry_body(normalized(state.loaded), key) or {}, previous)
    return _changed(before, version, state, [key, *([previous] if previous else [])], by)


@transaction.atomic
def config_entry_delete(*, key: EntryKey, build: Build | None = None, by: Provenance = ADMIN_PLANE) -> StoredChange:
    """Remove one entry; raises `EntryMissing`, or `ConfigError` when the rest would be invalid."""
    version = _locked_version()
    before = selectors.stored_document()
    state = built(without_entry(before, key), source=version.source or None, build=build)
    selectors.entry_rows(key).delete()
    return _changed(before, version, state, [key], by)


@transaction.atomic
def config_revision_rollback(*, revision: ConfigRevision, by: Provenance) -> StoredChange:
    """Put the entry back as `revision` left it (removed, when that write removed it), validated like any
    write; raises `ConfigError` (nothing changes) or `EntryMissing` (it is already absent)."""
    if revision.after is None:
        return config_entry_delete(key=revision.key, by=by)
    return config_entry_put(key=revision.key, body=revision.after, by=by)


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
def config_import(*, document: Any, source: str | None = None, by: Provenance | None = None) -> StoredChange:
    """Replace the whole stored config with `document` (legacy form expanded), read from the file `source`;
    raises `ConfigError`."""
    state = built(document, source=source)
    version = _locked_version()
    version.source = source or ""
    before = selectors.stored_document()
    for model in ROW_MODELS.values():
        model._default_manager.all().delete()
    after = normalized(state.loaded)
    _insert_rows(after)
    number = _bump(version)
    _record(before, selectors.stored_document(), [*entry_keys(before), *entry_keys(after)], number, by or IMPORT)
    return StoredChange(version=number, state=state, body=None)


@transaction.atomic
def config_seed(*, path: str, server: dict[str, str]) -> StoredChange | None:
    """Import the file at `path` when nothing was ever stored, then give the stored `server` section these
    listeners (`listen`, `admin_listen`) when it names others; None when nothing changed. Raises
    `ConfigError`."""
    change = None
    if selectors.config_version() == 0:
        change = config_import(document=normalized(load_config_file(path)), source=path)
    current = selectors.stored_document().get("server", {})
    wanted = {**current, **server}
    if wanted != current:
        change = config_entry_put(key=EntryKey("sections", "server"), body=wanted, by=Provenance(origin="up"))
    return change
