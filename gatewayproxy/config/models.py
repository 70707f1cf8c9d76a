"""Typed models of every section of the gateway configuration document (strict except the guardrail sections)."""

from __future__ import annotations

import os
import zoneinfo
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gatewayproxy.config.kinds import canonical_kind


def _absolute_path(value: str, info: ValidationInfo) -> str:
    """Paths in the document are relative to the directory of the config file."""
    base_dir = (info.context or {}).get("base_dir")
    if base_dir and not os.path.isabs(value):
        return os.path.normpath(os.path.join(base_dir, value))
    return value


def _listen_address(value: str) -> str:
    host, separator, port = value.rpartition(":")
    if not separator or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {value!r}")
    return value


FilePath = Annotated[str, AfterValidator(_absolute_path)]
ListenAddress = Annotated[str, AfterValidator(_listen_address)]
PositiveInt = Annotated[int, Field(gt=0)]


class Strict(BaseModel):
    """Base of the strict sections: unknown keys are errors, models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Lenient(BaseModel):
    """Base of the lenient sections: unknown (or misspelled) keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class Tls(Strict):
    """A listener's certificate chain and key (PEM files, re-read when they change)."""

    cert: FilePath
    key: FilePath


class Limits(Strict):
    """Connection limits of both listeners (our addition; interface.md names none)."""

    max_header_bytes: PositiveInt = 16384
    max_header_count: PositiveInt = 100
    max_body_bytes: PositiveInt = 32 * 1024 * 1024
    header_read_timeout_ms: PositiveInt = 10000
    idle_timeout_ms: PositiveInt = 75000
    drain_timeout_ms: PositiveInt = 30000


class Server(Strict):
    """The `server` section: listeners and connection limits."""

    listen: ListenAddress = "0.0.0.0:8080"
    admin_listen: ListenAddress = "127.0.0.1:9099"
    max_concurrent_requests: PositiveInt = 4096
    request_timeout_ms: PositiveInt = 120000
    stream_idle_timeout_ms: PositiveInt = 60000
    tls: Tls | None = None
    admin_tls: Tls | None = None
    admin_token_file: FilePath | None = None
    limits: Limits = Limits()


class ScopeFrom(Strict):
    """Where a validator finds scope values: JWT claims (wired) and headers (accepted only)."""

    jwt_claims: dict[str, str] = {}
    header_map: dict[str, str] = {}


class Validator(Strict):
    """One identity validator (`jwt` or `api_key`)."""

    name: str
    kind: Literal["jwt", "api_key"]
    issuers: list[str] = []
    audiences: list[str] = []
    jwks_url: str | None = None
    static_public_key_pem: FilePath | None = None
    insecure_allow_any_issuer: bool = False
    insecure_allow_any_audience: bool = False
    scope_from: ScopeFrom = ScopeFrom()
    keys_file: FilePath | None = None
    header: str | None = None
    require_exp: bool = True
    leeway_secs: Annotated[float, Field(ge=0)] = 30
    jwks_refresh_secs: Annotated[float, Field(gt=0)] = 300  # the JWKS refetched this often (keys removed dropped)

    @model_validator(mode="after")
    def _kind_requirements(self) -> Validator:
        if self.kind == "api_key":
            if self.header is not None:
                raise ValueError("api_key accepts only `Authorization: Bearer`; a custom `header` is refused")
            if self.keys_file is None:
                raise ValueError("api_key requires `keys_file`")
            return self
        if self.jwks_url is None and self.static_public_key_pem is None:
            raise ValueError("jwt requires `jwks_url` or `static_public_key_pem`")
        if not self.issuers and not self.insecure_allow_any_issuer:
            raise ValueError("empty `issuers` requires `insecure_allow_any_issuer: true`")
        if not self.audiences and not self.insecure_allow_any_audience:
            raise ValueError("empty `audiences` requires `insecure_allow_any_audience: true`")
        return self


class Identity(Strict):
    """The `identity` section: tenancy dimensions and the validators tried in order."""

    scope_dims: list[str] = []
    validators: list[Validator] = []


class Credentials(Strict):
    """Where a destination's provider credential lives."""

    vault: str
    credential_id: str | None = None


class Pricing(Strict):
    """USD prices per million tokens (and per request) of a destination."""

    input_per_1m: float | None = None
    output_per_1m: float | None = None
    cache_read_per_1m: float | None = None
    cache_write_per_1m: float | None = None
    cache_write_1h_per_1m: float | None = None
    reasoning_output_per_1m: float | None = None
    per_request_usd: float | None = None


class DestinationResolver(Strict):
    """Dynamic lookup of the wildcard `mcp` destination; only `http` exists."""

    kind: Literal["http"]
    url_template: str
    bearer_token_file: FilePath | None = None
    timeout_ms: PositiveInt = 5000
    cache_ttl_secs: PositiveInt = 60


MODEL_KINDS = ("vendor_a", "vendor_b", "cloud_vendor_c", "vendor_a_compatible", "vendor_d", "vendor_e")
DestinationKind = Literal[
    "mcp", "vendor_a", "vendor_b", "cloud_vendor_c", "vendor_a_compatible", "vendor_d", "vendor_e", "native_api_key"
]
# Adapter-specific fields and the kinds that may carry them; anywhere else they are typos.
KIND_ONLY_FIELDS: dict[str, tuple[str, ...]] = {
    "region": ("vendor_d",),
    "profile": ("vendor_d",),
    "deployment": ("cloud_vendor_c",),
    "api_version": ("cloud_vendor_c",),
    "project": ("vendor_e",),
    "location": ("vendor_e",),
    "url": ("mcp",),
    "destination_resolver": ("mcp",),
    "provider": ("native_api_key",),
    "api": ("native_api_key", "vendor_d"),
    "allowed_paths": ("native_api_key",),
    "auth": ("native_api_key",),
    "forward_headers": ("native_api_key", *MODEL_KINDS),
    "headers": ("native_api_key",),
    "allowed_query_params": ("native_api_key",),
}
# Kinds whose provider library finds credentials itself (botocore's chain, application default credentials)
# when a destination names no vault.
AMBIENT_CREDENTIAL_KINDS = ("vendor_d", "vendor_e")
VENDOR_D_APIS = ("converse", "invoke")
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "cloud_vendor_c": ("base_url",),
    "vendor_e": ("project", "location"),
    "native_api_key": ("provider", "api", "base_url", "allowed_paths", "auth"),
}


class OutlierDetection(Strict):
    """Ejection of a failing destination (named after Envoy's): after `consecutive_failures` failures in a row
    it is skipped for `ejection_ms` times the ejections in a row, at most `max_ejection_ms`."""

    consecutive_failures: PositiveInt = 5
    ejection_ms: PositiveInt = 30000
    max_ejection_ms: PositiveInt = 300000


class Destination(Strict):
    """One destination: a model provider, an MCP server or a native API-key proxy target."""

    kind: DestinationKind
    base_url: str | None = None
    url: str | None = None
    region: str | None = None
    profile: str | None = None
    credentials: Credentials | None = Field(default=None, validate_default=True)
    model_map: dict[str, str] = {}
    pricing: Pricing | None = None
    destination_resolver: DestinationResolver | None = None
    deployment: str | None = None
    api_version: str | None = None
    project: str | None = None
    location: str | None = None
    provider: str | None = None
    api: str | None = None
    allowed_paths: list[str] | None = None
    auth: dict[str, Any] | None = None
    forward_headers: list[str] | None = None
    headers: dict[str, str] | None = None
    allowed_query_params: list[str] | None = None
    outlier_detection: OutlierDetection | None = None
    max_connections: PositiveInt = 256
    max_connections_wait_ms: PositiveInt = 1000

    @field_validator("credentials")
    @classmethod
    def _credentials_required(cls, value: Credentials | None, info: ValidationInfo) -> Credentials | None:
        if value is None and info.data.get("kind") not in AMBIENT_CREDENTIAL_KINDS:
            raise PydanticCustomError("missing", "Field required")
        return value

    @model_validator(mode="after")
    def _kind_fields(self) -> Destination:
        for field, kinds in KIND_ONLY_FIELDS.items():
            if getattr(self, field) is not None and self.kind not in kinds:
                raise ValueError(f"`{field}` is not a field of kind {self.kind!r}")
        missing = [field for field in REQUIRED_FIELDS.get(self.kind, ()) if not getattr(self, field)]
        if missing:
            raise ValueError(f"kind {self.kind!r} requires " + ", ".join(f"`{field}`" for field in missing))
        if self.kind == "vendor_d" and self.api is not None and self.api not in VENDOR_D_APIS:
            raise ValueError("`api` of kind 'vendor_d' is one of " + ", ".join(VENDOR_D_APIS))
        if self.kind == "native_api_key" and (self.model_map or self.pricing is not None):
            raise ValueError("native_api_key rejects `model_map` and `pricing`")
        if self.kind == "mcp" and not (self.base_url or self.url or self.destination_resolver):
            raise ValueError("a static mcp destination requires `base_url` (or `url`)")
        return self

    @property
    def vault_name(self) -> str:
        """The vault of the destination's credential; empty when the provider's own chain finds it."""
        return self.credentials.vault if self.credentials is not None else ""

    @property
    def credential_id(self) -> str:
        """The credential to look up in the vault; defaults to the vault name."""
        if self.credentials is None:
            return ""
        return self.credentials.credential_id or self.credentials.vault


class Match(Strict):
    """A route's match clauses; every one given must hold."""

    path: str | None = None
    model: str | None = None
    header: dict[str, str] = {}
    scope: dict[str, str] = {}
    scope_kind: Literal["equals"] = "equals"


class Target(Strict):
    """One destination of a strategy, with its weight and parameter shaping."""

    destination: str
    weight: Annotated[int, Field(ge=0)] | None = None
    default_params: dict[str, Any] = {}
    override_params: dict[str, Any] = {}
    drop_params: list[str] = []


class Condition(Strict):
    """A `conditional` strategy entry: the first whose `if` holds picks its target."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    if_: dict[str, str] = Field(alias="if")
    target: str


RETRY_TRIGGER_ALIASES = {
    "http_5xx": "5xx",
    "5xx": "5xx",
    "http_429": "429",
    "429": "429",
    "timeout_ms": "timeout",
    "timeout": "timeout",
}


class Retry(Strict):
    """Per-target retry budget and the failures that consume it."""

    triggers: list[str] | None = None
    max_attempts: PositiveInt = 1
    backoff_ms: Annotated[int, Field(ge=0)] = 0

    @field_validator("triggers")
    @classmethod
    def _canonical_triggers(cls, triggers: list[str] | None) -> list[str] | None:
        if triggers is None:
            return None
        unknown = [trigger for trigger in triggers if trigger not in RETRY_TRIGGER_ALIASES]
        if unknown:
            raise ValueError(f"unknown retry triggers {unknown}; use any of {sorted(RETRY_TRIGGER_ALIASES)}")
        return sorted({RETRY_TRIGGER_ALIASES[trigger] for trigger in triggers})


class Strategy(Strict):
    """How a route spreads a request over its targets."""

    mode: Literal["fallback", "loadbalance", "conditional"]
    targets: list[Target] = []
    conditions: list[Condition] = []
    default: str | None = None
    retry: Retry | None = None
    timeout_ms: PositiveInt | None = None

    @model_validator(mode="after")
    def _targets_and_weights(self) -> Strategy:
        if not self.targets and self.mode != "conditional":
            raise ValueError(f"mode {self.mode!r} requires at least one target")
        if self.mode == "conditional" and not self.conditions:
            raise ValueError("mode 'conditional' requires `conditions`")
        weights = [target.weight for target in self.targets]
        if any(weight is not None for weight in weights):
            if None in weights:
                raise ValueError("give a weight to every target or to none")
            if sum(weight or 0 for weight in weights) != 100:
                raise ValueError(f"target weights must sum to 100, they sum to {sum(w or 0 for w in weights)}")
        return self


class Route(Strict):
    """A route: match clauses, a strategy, whether retries are safe, and what translation between shapes does
    with a field the target cannot carry (`strict`: refuse it with 400; `lenient`: drop it and say so)."""

    name: str
    match: Match = Match()
    idempotency_safe: bool = True
    strategy: Strategy
    translation: Literal["strict", "lenient"] = "strict"


class PluginInstance(BaseModel):
    """One plugin instance; kind-specific settings are kept for the stage that builds it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str
    kind: str
    required: bool = True
    failure_mode: Literal["deny", "allow", "log_only"] = "deny"


def _check_kind(slot: str) -> AfterValidator:
    def check(instance: PluginInstance) -> PluginInstance:
        canonical_kind(slot, instance.kind)
        return instance

    return AfterValidator(check)


def _check_kinds(slot: str) -> AfterValidator:
    def check(instances: list[PluginInstance]) -> list[PluginInstance]:
        names = [instance.name for instance in instances]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"plugin names must be unique within {slot!r}: {duplicates}")
        for instance in instances:
            canonical_kind(slot, instance.kind)
        return instances

    return AfterValidator(check)


class Plugins(Strict):
    """The plugin slots: three single instances and the ordered lists."""

    rate_limiter: Annotated[PluginInstance, _check_kind("rate_limiter")] | None = None
    cache: Annotated[PluginInstance, _check_kind("cache")] | None = None
    cost_model: Annotated[PluginInstance, _check_kind("cost_model")] | None = None
    guardrails: Annotated[list[PluginInstance], _check_kinds("guardrails")] = []
    authorizers: Annotated[list[PluginInstance], _check_kinds("authorizers")] = []
    usage_sinks: Annotated[list[PluginInstance], _check_kinds("usage_sinks")] = []
    audit_sinks: Annotated[list[PluginInstance], _check_kinds("audit_sinks")] = []
    trace_exporters: Annotated[list[PluginInstance], _check_kinds("trace_exporters")] = []
    signers: Annotated[list[PluginInstance], _check_kinds("signers")] = []


class RateLimitMatch(Strict):
    """Rate limits match on scope only."""

    scope: dict[str, str] = {}


class RateLimit(Strict):
    """One rate or spend limit for a scope."""

    name: str
    match: RateLimitMatch = RateLimitMatch()
    qpm: PositiveInt | None = None
    tpm: PositiveInt | None = None
    qph: PositiveInt | None = None
    tph: PositiveInt | None = None
    budget_usd_per_day: Annotated[float, Field(gt=0)] | None = None
    budget_usd_per_month: Annotated[float, Field(gt=0)] | None = None


class SpendHeaders(Strict):
    """Whether headroom headers are emitted."""

    enabled: bool = False


class Admission(Strict):
    """Spend admission estimates."""

    default_max_output_tokens: PositiveInt = 4096
    unpriced_model: Literal["deny", "estimate", "allow_untracked"] = "deny"
    estimate_usd_per_request: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _estimate_needs_amount(self) -> Admission:
        if self.unpriced_model == "estimate" and self.estimate_usd_per_request is None:
            raise ValueError("`unpriced_model: estimate` requires `estimate_usd_per_request`")
        return self


class Spend(Strict):
    """The `spend` section: limiter keys, trusted headers, tags, windows and admission."""

    key_dims: list[str] = []
    trusted_header_dims: list[str] = []
    request_tag_allowlist: list[str] = []
    budget_timezone: str = "UTC"
    headers: SpendHeaders = SpendHeaders()
    admission: Admission = Admission()

    @field_validator("budget_timezone")
    @classmethod
    def _known_timezone(cls, name: str) -> str:
        if name not in zoneinfo.available_timezones() and name != "UTC":
            raise ValueError(f"unknown IANA timezone {name!r}")
        return name


class Verification(Lenient):
    """Signature verification of a file guardrail source."""

    allow_unsigned: bool = False
    public_key_file: FilePath | None = None
    public_key_pem: str | None = None


class GuardrailSource(Lenient):
    """Where policy guardrail bundles come from (lenient: unknown keys ignored)."""

    name: str | None = None
    kind: Literal["file", "registry"]
    path: str | None = None
    endpoint: str | None = None
    verification: Verification = Verification()
    source_id: str | None = None
    high_water_path: FilePath | None = None
    reload_interval_secs: PositiveInt = 120
    base_url: str | None = None
    bearer_token_file: FilePath | None = None
    timeout_ms: PositiveInt = 3000
    cache_ttl_secs: PositiveInt = 900
    on_backend_error: Literal["deny", "allow", "last_known"] = "last_known"
    trust_session_header: bool = False  # take the policy session from `x-session-id` when no verified scope has it

    @model_validator(mode="after")
    def _kind_requirements(self) -> GuardrailSource:
        if self.kind == "file":
            if not self.path:
                raise ValueError("a `file` guardrail source requires `path`")
            signed = not self.verification.allow_unsigned
            if signed and not (self.source_id and self.high_water_path):
                raise ValueError("a signed file source requires `source_id` and `high_water_path`")
            if signed and not (self.verification.public_key_file or self.verification.public_key_pem):
                raise ValueError("a signed file source requires `verification.public_key_file` or `public_key_pem`")
        elif not (self.base_url and self.bearer_token_file):
            raise ValueError("a `registry` guardrail source requires `base_url` and `bearer_token_file`")
        return self

    @property
    def registry_endpoint(self) -> str:
        """The registry path bundles are fetched from."""
        return self.endpoint or self.path or "/internal/v1/guardrails/effective"


def _at_least_one(value: int) -> int:
    return max(value, 1)


Ttl = Annotated[int, AfterValidator(_at_least_one)]


class GuardrailState(Lenient):
    """Where per-session guardrail state lives (lenient: unknown keys ignored)."""

    name: str | None = None
    kind: Literal["memory", "redis"]
    url: str | None = None
    key_prefix: str = "gw:"
    session_ttl_secs: Ttl = 86400
    turn_ttl_secs: Ttl = 300
    subject_day_ttl_secs: Ttl = 172800
    subject_minute_ttl_secs: Ttl = 300
    flush_interval_ms: PositiveInt = 2000

    @model_validator(mode="after")
    def _redis_needs_url(self) -> GuardrailState:
        if self.kind == "redis" and not self.url:
            raise ValueError("a `redis` guardrail state requires `url`")
        return self


PolicyPhase = Literal["llm_request", "llm_response", "tool_call", "tool_result", "request", "response"]
POLICY_PHASES: tuple[PolicyPhase, ...] = ("llm_request", "llm_response", "tool_call", "tool_result")
PolicyAction = Literal["deny", "allow", "soft_allow_with_alert"]


class PolicyFailureMode(Strict):
    """What a failed policy evaluation does, per phase."""

    llm_request: PolicyAction = "allow"


class GuardrailsPolicy(Strict):
    """The `guardrails_policy` section."""

    mode: Literal["off", "observe", "enforce"] = "off"
    phases: list[PolicyPhase] = list(POLICY_PHASES)
    failure_mode: PolicyFailureMode = PolicyFailureMode()
    on_missing: PolicyAction = "allow"
    on_expired: PolicyAction = "soft_allow_with_alert"
    on_unsupported_guardrail: Literal["deny", "skip_with_alert"] = "deny"
    refresh_interval_secs: PositiveInt = 30
    max_staleness_secs: PositiveInt = 900

    @model_validator(mode="after")
    def _harness_phases_need_policy_off(self) -> GuardrailsPolicy:
        harness_only = [phase for phase in self.phases if phase in ("request", "response")]
        if self.mode != "off" and harness_only:
            raise ValueError(f"harness-only phases {harness_only} are rejected while policy is active")
        return self


class VaultCache(Strict):
    """Cache of resolved secrets (for the `http` resolver)."""

    enabled: bool = True
    ttl_secs: PositiveInt = 300
    max_entries: PositiveInt = 1024


class Vault(Strict):
    """One vault: how provider credentials are resolved."""

    name: str
    resolver: Literal["env", "static_file", "http"]
    env_var: str | None = None
    scheme: str | None = None
    prefix: str = "VAULT__"
    file: FilePath | None = None
    url_template: str | None = None
    bearer_token_file: FilePath | None = None
    timeout_ms: PositiveInt = 5000
    cache: VaultCache = VaultCache()

    @model_validator(mode="after")
    def _resolver_requirements(self) -> Vault:
        if self.resolver == "static_file" and not self.file:
            raise ValueError("the `static_file` resolver requires `file`")
        if self.resolver == "http" and not self.url_template:
            raise ValueError("the `http` resolver requires `url_template`")
        return self


class GatewayConfig(Strict):
    """The whole configuration document after legacy expansion."""

    server: Server = Server()
    identity: Identity = Identity()
    destinations: dict[str, Destination] = {}
    routes: list[Route] = []
    plugins: Plugins = Plugins()
    rate_limits: list[RateLimit] = []
    spend: Spend = Spend()
    guardrail_source: GuardrailSource | None = None
    guardrail_state: GuardrailState | None = None
    guardrails_policy: GuardrailsPolicy = GuardrailsPolicy()
    vaults: list[Vault] = []
