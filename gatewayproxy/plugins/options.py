"""Validation of a plugin instance's own options (the keys beyond `name`, `kind`, `required`, `failure_mode`)."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.config.models import PluginInstance


class Options(BaseModel):
    """Base of a kind's own options: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Kind = TypeVar("Kind", bound=Options)


def plugin_options(key: str, model: type[Kind], instance: PluginInstance) -> Kind:
    """The kind's own options of `instance`, validated; a bad one raises `ConfigError` naming `<key>.<option>`."""
    try:
        return model.model_validate(instance.model_extra or {})
    except ValidationError as error:
        problems = []
        for item in error.errors():
            location = "".join(f".{part}" for part in item["loc"])
            message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"].removeprefix("Value error, ")
            problems.append(f"{key}{location}: {message}")
        raise ConfigError(problems) from None
