"""Authorizer kinds (`plugins.authorizers[]`): `allow_all`, `yaml_acl`, `opa_http` and `ext_proc`. Each judges
the request's facts (`authorization_input`) and answers a `Decision`; a backend that fails raises `BackendError`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError

from gatewayproxy.config.globs import Glob, compile_glob
from gatewayproxy.config.loader import ConfigError
from gatewayproxy.config.models import FilePath, PluginInstance
from gatewayproxy.plugins.decisions import BackendError, PluginOptions, plugin_options, post_json
from gatewayproxy.plugins.deps import PluginDeps

PositiveInt = Annotated[int, Field(gt=0)]
HttpUrl = Annotated[str, Field(pattern=r"^https?://")]


@dataclass(frozen=True)
class Decision:
    """An authorizer's answer; `reason` is shown to the client when it denies."""

    allowed: bool
    reason: str = ""


class Authorizer:
    """Base of the kinds: a name, a failure mode and `decide`."""

    def __init__(self, instance: PluginInstance) -> None:
        self.name = instance.name
        self.failure_mode = instance.failure_mode

    async def decide(self, facts: dict[str, Any]) -> Decision:
        """Allow or deny the request described by `facts`; raises `BackendError` when no decision can be had."""
        raise NotImplementedError


class AllowAll(Authorizer):
    """Allows everything (an explicit placeholder for "no restriction")."""

    async def decide(self, facts: dict[str, Any]) -> Decision:
        return Decision(True)


class AclRule(PluginOptions):
    """One `yaml_acl` rule: who it is for (principal glob, scope pairs) and what they may reach (glob lists; an
    absent list allows anything, an empty one nothing)."""

    name: str = ""
    principal: str = "*"
    scope: dict[str, str] = {}
    routes: list[str] | None = None
    models: list[str] | None = None
    paths: list[str] | None = None
    mcp_tools: list[str] | None = None


class AclFile(PluginOptions):
    """The `yaml_acl` file: rules tried in order; the first whose principal and scope match decides."""

    rules: list[AclRule]


def _any_glob(patterns: list[str] | None) -> list[Glob] | None:
    return None if patterns is None else [compile_glob(pattern) for pattern in patterns]


class CompiledRule:
    """An ACL rule with its globs compiled."""

    def __init__(self, rule: AclRule, index: int) -> None:
        self.label = rule.name or f"rules[{index}]"
        self.principal = compile_glob(rule.principal)
        self.scope = {dim: compile_glob(value) for dim, value in rule.scope.items()}
        self.allowed = {
            "route": _any_glob(rule.routes),
            "model": _any_glob(rule.models),
            "path": _any_glob(rule.paths),
            "tool": _any_glob(rule.mcp_tools),
        }

    def applies(self, facts: dict[str, Any]) -> bool:
        """Whether the rule is about this caller."""
        scope = facts["scope"]
        return self.principal(facts["principal"]) and all(
            dim in scope and glob(scope[dim]) for dim, glob in self.scope.items()
        )

    def refusal(self, facts: dict[str, Any]) -> str | None:
        """What the rule does not allow in this request, or None."""
        values = {
            "route": facts["route"],
            "model": facts["model"],
            "path": facts["path"],
            "tool": (facts.get("mcp") or {}).get("tool"),
        }
        for field, globs in self.allowed.items():
            value = values[field]
            # A fact the request does not have (no model on MCP, no tool outside tools/call) is not restricted.
            if globs is not None and value is not None and not any(glob(value) for glob in globs):
                return f"{field} {value!r} is not allowed by {self.label}"
        return None


class YamlAclOptions(PluginOptions):
    """Options of `yaml_acl`."""

    file: FilePath


def load_acl(path: str, key: str) -> list[CompiledRule]:
    """The rules of an ACL file, validated at build time: a bad file fails boot naming `key`."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        rules = AclFile.model_validate(document).rules
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError([f"{key}.file: cannot read {path}: {error}"]) from None
    except ValidationError as error:
        raise ConfigError(
            [f"{key}.file: {'.'.join(map(str, item['loc']))}: {item['msg']}" for item in error.errors()]
        ) from None
    return [CompiledRule(rule, index) for index, rule in enumerate(rules)]


class YamlAcl(Authorizer):
    """Rules from a YAML file; the first rule about the caller decides; no rule about the caller denies."""

    def __init__(self, instance: PluginInstance, rules: list[CompiledRule]) -> None:
        super().__init__(instance)
        self.rules = rules

    async def decide(self, facts: dict[str, Any]) -> Decision:
        rule = next((rule for rule in self.rules if rule.applies(facts)), None)
        if rule is None:
            return Decision(False, "no access rule covers this caller")
        refusal = rule.refusal(facts)
        return Decision(refusal is None, refusal or "")


class OpaHttpOptions(PluginOptions):
    """Options of `opa_http`: the server root and the policy's package path (`gateway/authz` or `gateway.authz`)."""

    url: HttpUrl
    package: str
    rule: str | None = None
    timeout_ms: PositiveInt = 1000
    bearer_token_file: FilePath | None = None


class OpaHttp(Authorizer):
    """Asks OPA's data API: `POST {url}/v1/data/<package>[/<rule>]` with `{"input": facts}`; allowed when `result`
    is true or `result.allow` is true."""

    def __init__(self, instance: PluginInstance, options: OpaHttpOptions, deps: PluginDeps) -> None:
        super().__init__(instance)
        path = "/".join(part for part in (options.package.replace(".", "/").strip("/"), options.rule) if part)
        self.endpoint = f"{options.url.rstrip('/')}/v1/data/{path}"
        self.options = options
        self.pool = deps.pool

    async def decide(self, facts: dict[str, Any]) -> Decision:
        answer = await post_json(
            self.pool, self.endpoint, {"input": facts}, self.options.timeout_ms / 1000, self.options.bearer_token_file
        )
        if not isinstance(answer, dict):
            raise BackendError("OPA answered something other than an object")
        result = answer.get("result")
        if isinstance(result, dict):
            reason = result.get("reason")
            return Decision(result.get("allow") is True, reason if isinstance(reason, str) else "")
        # An undefined decision (no `result`) denies, as OPA's own default does.
        return Decision(result is True, "" if result is True else "denied by policy")


class ExtProcOptions(PluginOptions):
    """Options of the `ext_proc` authorizer."""

    url: HttpUrl
    timeout_ms: PositiveInt = 1000
    bearer_token_file: FilePath | None = None


class ExtProcAuthorizer(Authorizer):
    """Posts the facts to an external processor, which answers `{"allow": bool, "reason": ...}`."""

    def __init__(self, instance: PluginInstance, options: ExtProcOptions, deps: PluginDeps) -> None:
        super().__init__(instance)
        self.options = options
        self.pool = deps.pool

    async def decide(self, facts: dict[str, Any]) -> Decision:
        answer = await post_json(
            self.pool, self.options.url, facts, self.options.timeout_ms / 1000, self.options.bearer_token_file
        )
        if not isinstance(answer, dict) or not isinstance(answer.get("allow"), bool):
            raise BackendError("the processor's answer has no boolean `allow`")
        return Decision(answer["allow"], str(answer.get("reason") or ""))


def build_authorizer(instance: PluginInstance, key: str, deps: PluginDeps) -> Authorizer:
    """The authorizer of one plugin instance, its options (and ACL file) validated at build time."""
    if instance.kind == "allow_all":
        plugin_options(PluginOptions, instance, key, deps.base_dir)
        return AllowAll(instance)
    if instance.kind == "yaml_acl":
        options = plugin_options(YamlAclOptions, instance, key, deps.base_dir)
        return YamlAcl(instance, load_acl(options.file, key))
    if instance.kind == "opa_http":
        return OpaHttp(instance, plugin_options(OpaHttpOptions, instance, key, deps.base_dir), deps)
    return ExtProcAuthorizer(instance, plugin_options(ExtProcOptions, instance, key, deps.base_dir), deps)
