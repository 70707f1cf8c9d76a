"""Field help of the config admin's JSON boxes, generated from the typed config's JSON schema
(`GatewayConfig.model_json_schema()`): the allowed keys of an entry's body (nested ones dotted, list items
as `[]`) with their types, defaults and descriptions."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from gatewayproxy.config.kinds import SUPPORTED_KINDS
from gatewayproxy.config.models import GatewayConfig, PluginInstance

MAX_DEPTH = 4  # nested keys listed this deep (the config's deepest useful keys)


@dataclass(frozen=True)
class KeyHelp:
    """One allowed key: its dotted path, type, default (JSON, "" when required or none) and description."""

    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class EntryHelp:
    """The help of one kind of entry: a title, the model's description and its keys."""

    title: str
    description: str
    keys: tuple[KeyHelp, ...]


@functools.cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = GatewayConfig.model_json_schema(by_alias=True)
    return schema


def _resolved(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with a `$ref` replaced by its definition (its own description and default kept)."""
    if "$ref" not in node:
        return node
    target = _schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return {**target, **{key: value for key, value in node.items() if key != "$ref"}}


def _options(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives of `node` (its `anyOf`, or itself), null left out."""
    return [_resolved(option) for option in node.get("anyOf", [node]) if option.get("type") != "null"]


def type_text(node: dict[str, Any]) -> str:
    """A short type of a schema node: `string`, `integer > 0`, `"a" | "b"`, `list of Target`, `map of string`."""
    texts = [_one_type(option) for option in _options(node)]
    nullable = any(option.get("type") == "null" for option in node.get("anyOf", []))
    return " | ".join(texts) + (" | null" if nullable else "")


def _one_type(node: dict[str, Any]) -> str:
    if "enum" in node or "const" in node:
        return " | ".join(json.dumps(value) for value in node.get("enum", [node.get("const")]))
    kind = node.get("type", node.get("title", "any"))
    if kind == "array":
        return f"list of {type_text(_resolved(node.get('items', {})))}"
    if kind == "object" and "properties" not in node:
        extra = node.get("additionalProperties")
        return f"map of {type_text(_resolved(extra))}" if isinstance(extra, dict) else "object"
    if kind == "object":
        return str(node.get("title", "object"))
    bounds = [f"{sign} {node[key]}" for key, sign in _BOUNDS.items() if key in node]
    return " ".join([str(kind), *bounds])


_BOUNDS = {"exclusiveMinimum": ">", "minimum": ">=", "exclusiveMaximum": "<", "maximum": "<="}


def _keys(node: dict[str, Any], prefix: str, depth: int) -> list[KeyHelp]:
    """The keys of an object node, each followed by its nested keys (objects and lists of objects)."""
    required = set(node.get("required", []))
    found = []
    for name, child in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        default = "" if name in required or "default" not in child else json.dumps(child["default"])
        description = child.get("description") or _nested_description(child)
        found.append(KeyHelp(path, type_text(child), "required" if name in required else default, description))
        if depth < MAX_DEPTH:
            for option in _options(child):
                inner = _resolved(option.get("items", {})) if option.get("type") == "array" else option
                found += _keys(inner, f"{path}{'[]' if inner is not option else ''}.", depth + 1)
    return found


def _nested_description(node: dict[str, Any]) -> str:
    descriptions = [option.get("description", "") for option in _options(node)]
    return next((text for text in descriptions if text), "")


def _entry_schema(collection: str, name: str | None) -> dict[str, Any]:
    """The schema of one entry's body in `collection` (a section's by its `name`)."""
    properties = _schema()["properties"]
    if collection == "sections":
        return _resolved(_options(properties[str(name)])[0])
    if collection == "destinations":
        return _resolved(properties["destinations"]["additionalProperties"])
    return _resolved(properties[collection]["items"])


def entry_help(collection: str, name: str | None = None) -> EntryHelp:
    """The help of a body in `collection` (a section's: by its `name`; plugins: the keys every instance has)."""
    if collection == "plugins":
        schema = _resolved(PluginInstance.model_json_schema())
        kinds = "; ".join(f"{slot}: {', '.join(kinds)}" for slot, kinds in SUPPORTED_KINDS.items())
        description = f"{schema.get('description', '')} Kinds by slot: {kinds}. Other keys are the kind's options."
    else:
        schema = _entry_schema(collection, name)
        description = str(schema.get("description", ""))
    keys = tuple(key for key in _keys(schema, "", 1) if key.path != "name")  # the name is the row's own field
    return EntryHelp(title=str(schema.get("title", collection)), description=description, keys=keys)
