"""Loading a configuration document: YAML or JSON text to a validated, immutable `GatewayConfig`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from gatewayproxy.config.checks import config_problems, config_warnings
from gatewayproxy.config.legacy import LegacyFormatError, expand_legacy
from gatewayproxy.config.models import GatewayConfig

logger = logging.getLogger("gatewayproxy.config")
LEGACY_KEY = "legacy_mcp_gateway"


class ConfigError(Exception):
    """A config that fails validation; `problems` names the key of each failure."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid gateway config:\n  " + "\n  ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class LoadedConfig:
    """A validated config with the warnings it raised and the file it came from."""

    config: GatewayConfig
    warnings: list[str] = field(default_factory=list)
    source: str | None = None


def _location(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(document)"


def _pydantic_problems(error: ValidationError) -> list[str]:
    problems = []
    for item in error.errors():
        # Tagged unions and Annotated validators add function names to the location; drop them.
        loc = tuple(part for part in item["loc"] if not (isinstance(part, str) and part.startswith("function-")))
        message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"].removeprefix("Value error, ")
        problems.append(f"{_location(loc)}: {message}")
    return problems


def _expanded(document: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    if LEGACY_KEY not in document:
        return document, []
    others = sorted(key for key in document if key != LEGACY_KEY)
    if others:
        raise ConfigError(
            [f"{LEGACY_KEY}: mutually exclusive with every other top-level key (found: " + ", ".join(others) + ")"]
        )
    try:
        return expand_legacy(document[LEGACY_KEY])
    except LegacyFormatError as error:
        raise ConfigError([str(error)]) from None


def validate_document(document: Any, *, base_dir: str | None = None, source: str | None = None) -> LoadedConfig:
    """Validate a parsed document (structure, then cross-references); raises `ConfigError`."""
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(["(document): the top level must be a mapping"])
    document, warnings = _expanded(document)
    try:
        config = GatewayConfig.model_validate(document, context={"base_dir": base_dir})
    except ValidationError as error:
        raise ConfigError(_pydantic_problems(error)) from None
    problems = config_problems(config)
    if problems:
        raise ConfigError(problems)
    return LoadedConfig(config=config, warnings=warnings + config_warnings(config), source=source)


def parse_text(text: str | bytes, *, as_json: bool = False) -> Any:
    """Parse a document's text: JSON when asked, else YAML (a superset of JSON)."""
    try:
        return orjson.loads(text) if as_json else yaml.safe_load(text)
    except (yaml.YAMLError, orjson.JSONDecodeError) as error:
        raise ConfigError([f"(document): cannot parse: {error}".replace("\n", " ")]) from None


def read_yaml_file(path: str, what: str, error: Callable[[str], Exception]) -> Any:
    """The YAML (or JSON) document in the file at `path`; `error` of a message naming `what` and the file when it
    cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as problem:
        raise error(f"cannot read {what} {path}: {problem}") from None


def load_config_file(path: str, server: dict[str, str] | None = None) -> LoadedConfig:
    """Read, expand and validate the config file at `path`, logging its warnings; `server` overrides keys of
    its `server` section (the listeners a command line moves: `listen`, `admin_listen`)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ConfigError([f"(file): cannot read {path}: {error.strerror}"]) from None
    document = parse_text(text)
    if server and isinstance(document, dict) and LEGACY_KEY not in document:
        document["server"] = {**(document.get("server") or {}), **server}
    loaded = validate_document(document, base_dir=os.path.dirname(os.path.abspath(path)), source=path)
    for warning in loaded.warnings:
        logger.warning("%s", warning)
    return loaded
