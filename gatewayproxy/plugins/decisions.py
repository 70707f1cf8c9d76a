"""What guardrail and authorizer plugins share: validating a plugin instance's own options at build time, and
asking an HTTP decision backend (OPA, an external processor) within a deadline."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, ValidationError

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.config.models import PluginInstance
from gatewayproxy.server.upstream import Origin, UpstreamError, UpstreamPool
from gatewayproxy.vaults.resolvers import read_token_file

logger = logging.getLogger("gatewayproxy.decisions")
Options = TypeVar("Options", bound=BaseModel)
JSON_HEADERS = [(b"content-type", b"application/json"), (b"accept", b"application/json")]


class PluginOptions(BaseModel):
    """Base of a plugin kind's own options: unknown keys are typos, and fail boot."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendError(Exception):
    """A decision backend failed: unreachable, too slow, or an answer that is not a decision. `status` is the HTTP
    status of an answer that was not a 2xx."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def plugin_options(model: type[Options], instance: PluginInstance, key: str, base_dir: str | None = None) -> Options:
    """`instance`'s kind-specific settings validated by `model`; a bad one raises `ConfigError` naming its key
    (`key` is the instance's place in the document, e.g. `plugins.guardrails[0]`). Relative paths are resolved
    against `base_dir`, the config file's directory."""
    try:
        return model.model_validate(instance.model_extra or {}, context={"base_dir": base_dir})
    except ValidationError as error:
        problems = []
        for item in error.errors():
            location = "".join(f".{part}" for part in item["loc"])  # empty for a check of the whole block
            message = "unknown key" if item["type"] == "extra_forbidden" else item["msg"]
            problems.append(f"{key}{location}: {message.removeprefix('Value error, ')}")
        raise ConfigError(problems) from None


def read_token(path: str) -> str:
    """A bearer token from its file, reread on every call so a rotated token is picked up."""
    try:
        return read_token_file(path)
    except OSError as error:
        raise BackendError(f"cannot read the bearer token file: {error.strerror}") from None


async def post_json(
    pool: UpstreamPool, url: str, document: Any, timeout_seconds: float, token_file: str | None = None
) -> Any:
    """POST `document` to `url` and return the JSON answer of a 2xx; anything else raises `BackendError`."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = list(JSON_HEADERS)
    if token_file is not None:
        headers.append((b"authorization", b"Bearer " + read_token(token_file).encode()))
    try:
        async with asyncio.timeout(timeout_seconds):
            response = await pool.request(Origin.parse(url), b"POST", target.encode(), headers, orjson.dumps(document))
            body = await response.read()
    except TimeoutError:
        raise BackendError(f"no answer within {timeout_seconds * 1000:.0f} ms") from None
    except (UpstreamError, OSError) as error:
        raise BackendError(str(error)) from None
    if not 200 <= response.status < 300:
        raise BackendError(f"answered HTTP {response.status}", response.status)
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BackendError("answered with invalid JSON") from None


def passed_failures_counter(registry: CollectorRegistry, kind: str) -> Counter:
    """The counter, by plugin and `failure_mode`, of a plugin kind's backend failures that let the request pass
    (under `allow` or `log_only`): the `passed` counter of `failure_passes`."""
    return Counter(
        f"gateway_{kind}_backend_failures_passed",
        f"{kind.capitalize()} backend failures that let the request pass.",
        [kind, "failure_mode"],
        registry=registry,
    )


def failure_passes(failure_mode: str, plugin: str, request_id: str, error: BackendError, passed: Any) -> bool:
    """Whether a failed backend lets the request pass: `deny` refuses it (logged), `allow` passes it silently
    and `log_only` with a log line; both count on `passed`, a labelled counter."""
    if failure_mode == "deny":
        logger.warning("%s failed on request %s and refused it: %s", plugin, request_id, error)
        return False
    passed.inc()
    if failure_mode == "log_only":
        logger.warning("%s failed on request %s; passed under failure_mode log_only: %s", plugin, request_id, error)
    return True
