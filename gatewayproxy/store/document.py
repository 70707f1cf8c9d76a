"""The whole configuration document as the store edits it: one entry put or removed by collection and name,
then validated exactly as at boot (structure, cross-references, live checks and the snapshot build).

Pure functions on plain dicts; no ORM here, so the gateway and the Django admin share them. A gateway passes its
own `build`, so the snapshot validation built is the one it installs; without one the build is a throwaway trial.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gatewayproxy.config.kinds import LIST_SLOTS, SINGLE_INSTANCE_SLOTS
from gatewayproxy.config.loader import ConfigError, LoadedConfig, validate_document
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.live import live_problems
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import GatewayState, build_state

SINGLETON_SECTIONS = ("server", "identity", "spend", "guardrail_source", "guardrail_state", "guardrails_policy")
PLUGIN_SLOTS = (*SINGLE_INSTANCE_SLOTS, *LIST_SLOTS)
Build = Callable[[LoadedConfig], GatewayState]  # a snapshot built from a validated config (not yet started)


class EntryMissing(LookupError):
    """The entry to remove is not in the document."""


@dataclass(frozen=True)
class EntryKey:
    """Which entry of the document a write touches: `collection` is `destinations`, `routes`, `rate_limits`,
    `vaults`, `plugins` (with its `slot`) or `sections` (a singleton section, by its name)."""

    collection: str
    name: str
    slot: str | None = None

    def __str__(self) -> str:
        return f"{self.collection}.{self.slot}.{self.name}" if self.slot else f"{self.collection}.{self.name}"


def normalized(loaded: LoadedConfig) -> dict[str, Any]:
    """The JSON form of a validated config as written (defaults left out, file paths resolved)."""
    document: dict[str, Any] = loaded.config.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return document


def built(document: dict[str, Any], *, source: str | None = None, build: Build | None = None) -> GatewayState:
    """Validate as at boot (`source`: the file the config came from, for relative paths) and build the snapshot
    with `build` (a throwaway trial without one); raises `ConfigError` naming every problem's key."""
    base_dir = os.path.dirname(source) if source else None
    loaded = validate_document(document, base_dir=base_dir, source=source)
    problems = live_problems(loaded.config)
    if problems:
        raise ConfigError(problems)
    try:
        return build(loaded) if build is not None else _trial_build(loaded)
    except ConfigError:
        raise
    except Exception as error:  # a part that cannot be built is a problem of the document, reported as such
        raise ConfigError([f"(state): {error}"]) from None


def validated(document: dict[str, Any], *, source: str | None = None) -> LoadedConfig:
    """The config of `document`, validated as at boot with a trial build (the Django admin, imports)."""
    return built(document, source=source).loaded


def _trial_build(loaded: LoadedConfig) -> GatewayState:
    """A throwaway snapshot (never started, its pool closed), so plugin options are checked as at boot."""
    pool = UpstreamPool()
    try:
        return build_state(loaded, pool, SharedParts(), GatewayMetrics())
    finally:
        pool.close()


def _plugin_slot(key: EntryKey) -> str:
    if key.slot not in PLUGIN_SLOTS:
        raise ConfigError([f"plugins.slot: one of {', '.join(PLUGIN_SLOTS)} (got {key.slot!r})"])
    return key.slot


def entry_body(document: dict[str, Any], key: EntryKey) -> dict[str, Any] | None:
    """The body of an entry in `document` (list entries without their `name`), or None when absent."""
    if key.collection == "sections":
        return document.get(key.name)
    if key.collection == "destinations":
        return document.get("destinations", {}).get(key.name)
    if key.collection == "plugins":
        slot = _plugin_slot(key)
        held = document.get("plugins", {}).get(slot)
        entries = [held] if isinstance(held, dict) else (held or [])
    else:
        entries = document.get(key.collection, [])
    for entry in entries:
        if entry.get("name") == key.name:
            return {field: value for field, value in entry.items() if field != "name"}
    return None


def with_entry(document: dict[str, Any], key: EntryKey, body: dict[str, Any]) -> dict[str, Any]:
    """`document` with the entry put (replaced in place, or appended); `document` is not changed."""
    if not isinstance(body, dict):
        raise ConfigError([f"{key}: the body must be a JSON object"])
    if key.collection == "sections":
        return {**document, key.name: body}
    if key.collection == "destinations":
        return {**document, "destinations": {**document.get("destinations", {}), key.name: body}}
    entry = {"name": key.name, **{field: value for field, value in body.items() if field != "name"}}
    if body.get("name", key.name) != key.name:
        raise ConfigError([f"{key}.name: must match the name in the path ({key.name!r})"])
    if key.collection == "plugins":
        slot = _plugin_slot(key)
        plugins = dict(document.get("plugins", {}))
        plugins[slot] = entry if slot in SINGLE_INSTANCE_SLOTS else _replaced(plugins.get(slot, []), entry)
        return {**document, "plugins": plugins}
    return {**document, key.collection: _replaced(document.get(key.collection, []), entry)}


def _replaced(entries: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    names = [existing.get("name") for existing in entries]
    if entry["name"] in names:
        return [entry if name == entry["name"] else existing for name, existing in zip(names, entries, strict=True)]
    return [*entries, entry]


def without_entry(document: dict[str, Any], key: EntryKey) -> dict[str, Any]:
    """`document` without the entry; raises `EntryMissing`, or `ConfigError` for a destination still in use."""
    if entry_body(document, key) is None:
        raise EntryMissing(f"no {key.collection} entry named {key.name!r}")
    if key.collection == "sections":
        return {field: value for field, value in document.items() if field != key.name}
    if key.collection == "destinations":
        users = routes_using(document, key.name)
        if users:
            raise ConfigError([f"destinations.{key.name}: still referenced by route " + ", ".join(map(repr, users))])
        rest = {name: body for name, body in document["destinations"].items() if name != key.name}
        return {**document, "destinations": rest}
    if key.collection == "plugins":
        slot = _plugin_slot(key)
        plugins = dict(document["plugins"])
        if slot in SINGLE_INSTANCE_SLOTS:
            del plugins[slot]
        else:
            plugins[slot] = [entry for entry in plugins[slot] if entry.get("name") != key.name]
        return {**document, "plugins": plugins}
    entries = [entry for entry in document[key.collection] if entry.get("name") != key.name]
    return {**document, key.collection: entries}


def entry_keys(document: dict[str, Any]) -> list[EntryKey]:
    """The key of every entry in `document`."""
    keys = [EntryKey("sections", name) for name in SINGLETON_SECTIONS if name in document]
    keys += [EntryKey("destinations", name) for name in document.get("destinations", {})]
    for collection in ("routes", "rate_limits", "vaults"):
        keys += [EntryKey(collection, str(entry.get("name"))) for entry in document.get(collection, [])]
    for slot, held in document.get("plugins", {}).items():
        entries = [held] if isinstance(held, dict) else held
        keys += [EntryKey("plugins", str(entry.get("name")), slot) for entry in entries]
    return keys


def routes_using(document: dict[str, Any], destination: str) -> list[str]:
    """Names of the routes whose strategy names `destination` (as a target, a condition or the default)."""
    users = []
    for route in document.get("routes", []):
        strategy = route.get("strategy") or {}
        named = [target.get("destination") for target in strategy.get("targets", [])]
        named += [condition.get("target") for condition in strategy.get("conditions", [])]
        named.append(strategy.get("default"))
        if destination in named:
            users.append(str(route.get("name")))
    return users


def plugin_slots_named(document: dict[str, Any], name: str) -> list[str]:
    """The slots holding a plugin instance called `name`."""
    return [slot for slot in PLUGIN_SLOTS if entry_body(document, EntryKey("plugins", name, slot)) is not None]
