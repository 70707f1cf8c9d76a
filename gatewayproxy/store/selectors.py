"""Reads of the database-backed config: the whole document built from rows, and the version counter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import models, transaction

from gatewayproxy.config.kinds import SINGLE_INSTANCE_SLOTS
from gatewayproxy.store.document import EntryKey, entry_body, with_entry, without_entry
from gatewayproxy.store.models import ROW_MODELS, ConfigRevision, ConfigVersion, Destination, PluginInstance, Section

# The collections the document holds as lists of named entries, in their rows' order.
NAMED_LISTS = ("routes", "rate_limits", "vaults")


@dataclass(frozen=True)
class StoredConfig:
    """The stored document, the version it was read at, and the file it was last imported from."""

    version: int
    document: dict[str, Any]
    source: str | None


def config_version() -> int:
    """The current version counter (0 before the first write)."""
    number = ConfigVersion.objects.filter(pk=1).values_list("number", flat=True).first()
    return int(number or 0)


def config_source() -> str | None:
    """The file the stored config was last imported from (relative plugin paths resolve against it)."""
    return ConfigVersion.objects.filter(pk=1).values_list("source", flat=True).first() or None


def collection_rows(key: EntryKey) -> models.QuerySet[Any]:
    """The rows of the collection an entry belongs to (a plugin's: of its slot)."""
    rows = ROW_MODELS[key.collection]._default_manager.all()
    return rows.filter(slot=key.slot) if key.collection == "plugins" else rows


def entry_rows(key: EntryKey) -> models.QuerySet[Any]:
    """The row of one document entry (a queryset of at most one)."""
    return collection_rows(key).filter(name=key.name)


def _named(rows: Any) -> list[dict[str, Any]]:
    return [{"name": row.name, **row.body} for row in rows]


def _plugins() -> dict[str, Any]:
    plugins: dict[str, Any] = {}
    for row in PluginInstance.objects.all():
        entry = {"name": row.name, **row.body}
        if row.slot in SINGLE_INSTANCE_SLOTS:
            plugins[row.slot] = entry
        else:
            plugins.setdefault(row.slot, []).append(entry)
    return plugins


def stored_document() -> dict[str, Any]:
    """The configuration document the rows hold (empty sections left out)."""
    document: dict[str, Any] = {row.name: row.body for row in Section.objects.all()}
    sections = {
        "destinations": {row.name: row.body for row in Destination.objects.all()},
        **{collection: _named(ROW_MODELS[collection]._default_manager.all()) for collection in NAMED_LISTS},
        "plugins": _plugins(),
    }
    document.update({name: section for name, section in sections.items() if section})
    return document


def document_with_entry(*, key: EntryKey, body: dict[str, Any], previous: EntryKey | None = None) -> dict[str, Any]:
    """The stored document with one entry put; `previous` is the entry it renames (removed first)."""
    document = stored_document()
    if previous is not None and previous != key and entry_body(document, previous) is not None:
        document = without_entry(document, previous)
    return with_entry(document, key, body)


def stored_config() -> StoredConfig:
    """The document and its version, read in one transaction so they agree."""
    with transaction.atomic():
        return StoredConfig(version=config_version(), document=stored_document(), source=config_source())


def entry_revisions(key: EntryKey) -> models.QuerySet[ConfigRevision]:
    """The revisions of one entry, newest first."""
    return ConfigRevision.objects.filter(collection=key.collection, slot=key.slot or "", name=key.name).select_related(
        "author"
    )
