"""Config models, cross-checks, legacy expansion and live validation."""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gatewayproxy.config.loader import ConfigError, load_config_file, validate_document
from gatewayproxy.config.models import GatewayConfig
from gatewayproxy.pipeline.live import live_problems

BASE: dict[str, Any] = {
    "identity": {"scope_dims": ["team"]},
    "vaults": [{"name": "v", "resolver": "env"}],
    "destinations": {"a": {"kind": "vendor_a", "credentials": {"vault": "v"}}},
    "routes": [{"name": "r", "strategy": {"mode": "fallback", "targets": [{"destination": "a"}]}}],
}


def with_changes(**sections: Any) -> dict[str, Any]:
    document = copy.deepcopy(BASE)
    document.update(sections)
    return document


def problems_of(document: Any) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        validate_document(document)
    return raised.value.problems


def test_empty_document_gets_every_default() -> None:
    config = validate_document({}).config
    assert config.server.listen == "0.0.0.0:8080" and config.server.admin_listen == "127.0.0.1:9099"
    assert config.server.max_concurrent_requests == 4096 and config.server.request_timeout_ms == 120000
    assert config.spend.admission.default_max_output_tokens == 4096 and config.spend.budget_timezone == "UTC"
    assert config.guardrails_policy.mode == "off" and config.guardrails_policy.refresh_interval_secs == 30
    assert config.guardrails_policy.phases == ["llm_request", "llm_response", "tool_call", "tool_result"]


def test_section_defaults() -> None:
    config = validate_document(
        with_changes(
            vaults=[
                {"name": "v", "resolver": "env"},
                {"name": "h", "resolver": "http", "url_template": "http://x/{credential_id}"},
            ],
            guardrail_source={"kind": "registry", "base_url": "http://r", "bearer_token_file": "t"},
            guardrail_state={"kind": "redis", "url": "redis://x", "turn_ttl_secs": 0},
            plugins={"usage_sinks": [{"name": "s", "kind": "stdout"}]},
        )
    ).config
    http_vault = config.vaults[1]
    assert (http_vault.timeout_ms, http_vault.cache.ttl_secs, http_vault.cache.max_entries) == (5000, 300, 1024)
    assert config.vaults[0].prefix == "VAULT__"
    source = config.guardrail_source
    assert source is not None and (source.timeout_ms, source.cache_ttl_secs, source.reload_interval_secs) == (
        3000,
        900,
        120,
    )
    assert source.registry_endpoint == "/internal/v1/guardrails/effective" and source.on_backend_error == "last_known"
    state = config.guardrail_state
    assert state is not None and state.turn_ttl_secs == 1 and state.session_ttl_secs == 86400
    assert state.key_prefix == "gw:" and state.flush_interval_ms == 2000
    sink = config.plugins.usage_sinks[0]
    assert sink.required is True and sink.failure_mode == "deny"


def test_unknown_top_level_key_is_named() -> None:
    assert problems_of(with_changes(routez=[])) == ["routez: unknown key"]


def test_unknown_nested_key_is_named() -> None:
    document = with_changes()
    document["destinations"]["a"]["base_ulr"] = "http://x"
    assert problems_of(document) == ["destinations.a.base_ulr: unknown key"]


def test_guardrail_sections_ignore_unknown_keys() -> None:
    config = validate_document(
        with_changes(
            guardrail_state={"kind": "memory", "ttl_typo": 5},
            guardrail_source={"kind": "file", "path": "b.json", "x": 1, "verification": {"allow_unsigned": True}},
        )
    ).config
    assert config.guardrail_state is not None and config.guardrail_state.kind == "memory"


@pytest.mark.parametrize(
    ("slot", "instance", "available"),
    [
        ("rate_limiter", {"name": "r", "kind": "token_bucket_redis"}, "token_bucket_local, redis_window, token_bucket"),
        ("guardrails", [{"name": "g", "kind": "openai_moderation"}], "pii_regex, llm_evaluator, ext_proc"),
        ("usage_sinks", [{"name": "u", "kind": "parquet_s3"}], "stdout, kafka, postgres, registry"),
        ("cache", {"name": "c", "kind": "vector_semantic"}, "redis_exact"),
    ],
)
def test_unsupported_plugin_kind_lists_available_kinds(slot: str, instance: Any, available: str) -> None:
    (problem,) = problems_of(with_changes(plugins={slot: instance}))
    assert problem.startswith(f"plugins.{slot}") and f"available kinds: {available}" in problem


def test_plugin_alias_is_accepted() -> None:
    config = validate_document(with_changes(plugins={"rate_limiter": {"name": "r", "kind": "token_bucket"}})).config
    assert config.plugins.rate_limiter is not None


def test_duplicate_plugin_names_in_a_slot() -> None:
    (problem,) = problems_of(
        with_changes(plugins={"usage_sinks": [{"name": "s", "kind": "stdout"}, {"name": "s", "kind": "kafka"}]})
    )
    assert "unique" in problem


@pytest.mark.parametrize(
    ("targets", "fragment"),
    [
        ([{"destination": "a", "weight": 60}, {"destination": "a", "weight": 30}], "sum to 100"),
        ([{"destination": "a", "weight": 100}, {"destination": "a"}], "every target or to none"),
    ],
)
def test_loadbalance_weights(targets: list[dict[str, Any]], fragment: str) -> None:
    document = with_changes(routes=[{"name": "r", "strategy": {"mode": "loadbalance", "targets": targets}}])
    (problem,) = problems_of(document)
    assert problem.startswith("routes[0].strategy") and fragment in problem


def test_weights_all_absent_or_zero_excluding_are_valid() -> None:
    for targets in (
        [{"destination": "a"}, {"destination": "a"}],
        [{"destination": "a", "weight": 0}, {"destination": "a", "weight": 100}],
    ):
        validate_document(with_changes(routes=[{"name": "r", "strategy": {"mode": "loadbalance", "targets": targets}}]))


def test_cross_references_are_checked_together() -> None:
    document = with_changes(
        routes=[
            {
                "name": "r",
                "match": {"scope": {"region": "eu"}},
                "strategy": {"mode": "conditional", "conditions": [{"if": {"colour": "x"}, "target": "ghost"}]},
            }
        ],
        spend={"trusted_header_dims": ["tier"]},
    )
    document["destinations"]["a"]["credentials"]["vault"] = "nowhere"
    assert sorted(problems_of(document)) == sorted(
        [
            "spend.trusted_header_dims: scope dimension 'tier' is not declared in identity.scope_dims",
            "destinations.a.credentials.vault: vault 'nowhere' is not declared in vaults",
            "routes[0].match.scope: scope dimension 'region' is not declared in identity.scope_dims",
            "routes[0].strategy.conditions[0].target: destination 'ghost' is not declared",
            "routes[0].strategy.conditions[0].if.colour: a condition field is `model`, `path`, `header.<name>` or "
            "`scope.<dim>`",
        ]
    )


def test_retry_triggers_are_canonical() -> None:
    document = with_changes(
        routes=[
            {
                "name": "r",
                "strategy": {
                    "mode": "fallback",
                    "targets": [{"destination": "a"}],
                    "retry": {"triggers": ["http_5xx", "429", "timeout_ms"], "max_attempts": 2},
                },
            }
        ]
    )
    retry = validate_document(document).config.routes[0].strategy.retry
    assert retry is not None and retry.triggers == ["429", "5xx", "timeout"]
    document["routes"][0]["strategy"]["retry"]["triggers"] = ["4xx"]
    assert "unknown retry triggers" in problems_of(document)[0]


@pytest.mark.parametrize(
    ("validator", "fragment"),
    [
        ({"name": "k", "kind": "api_key", "keys_file": "k.yaml", "header": "x-api-key"}, "custom `header` is refused"),
        ({"name": "k", "kind": "api_key"}, "requires `keys_file`"),
        ({"name": "j", "kind": "jwt", "jwks_url": "http://x", "audiences": ["a"]}, "insecure_allow_any_issuer"),
        ({"name": "j", "kind": "jwt", "jwks_url": "http://x", "issuers": ["i"]}, "insecure_allow_any_audience"),
        ({"name": "j", "kind": "jwt", "issuers": ["i"], "audiences": ["a"]}, "jwks_url"),
    ],
)
def test_validator_requirements(validator: dict[str, Any], fragment: str) -> None:
    (problem,) = problems_of(with_changes(identity={"validators": [validator]}))
    assert problem.startswith("identity.validators[0]") and fragment in problem


def test_insecure_flags_warn_at_startup() -> None:
    loaded = validate_document(
        with_changes(
            identity={
                "validators": [
                    {
                        "name": "j",
                        "kind": "jwt",
                        "jwks_url": "http://x",
                        "insecure_allow_any_issuer": True,
                        "insecure_allow_any_audience": True,
                    }
                ]
            }
        )
    )
    assert len([warning for warning in loaded.warnings if "insecure_allow_any" in warning]) == 2


@pytest.mark.parametrize(
    ("destination", "fragment"),
    [
        ({"kind": "cloud_vendor_c"}, "requires `base_url`"),
        ({"kind": "vendor_e", "project": "p"}, "requires `location`"),
        ({"kind": "vendor_a", "project": "p"}, "`project` is not a field of kind 'vendor_a'"),
        ({"kind": "mcp"}, "requires `base_url`"),
        (
            {
                "kind": "native_api_key",
                "provider": "x",
                "api": "y",
                "base_url": "http://x",
                "allowed_paths": [],
                "auth": {"header": "k"},
            },
            "requires `allowed_paths`",
        ),
        (
            {
                "kind": "native_api_key",
                "provider": "x",
                "api": "y",
                "base_url": "http://x",
                "allowed_paths": ["/a"],
                "auth": {"header": "k"},
                "model_map": {"a": "b"},
            },
            "rejects `model_map` and `pricing`",
        ),
    ],
)
def test_destination_kind_requirements(destination: dict[str, Any], fragment: str) -> None:
    (problem,) = problems_of(
        with_changes(destinations={"d": {**destination, "credentials": {"vault": "v"}}}, routes=[])
    )
    assert problem.startswith("destinations.d") and fragment in problem


def test_credentials_vault_is_required() -> None:
    (problem,) = problems_of(with_changes(destinations={"d": {"kind": "vendor_a"}}, routes=[]))
    assert problem == "destinations.d.credentials: Field required"


def test_guardrail_cross_checks() -> None:
    problems = problems_of(with_changes(guardrails_policy={"mode": "enforce"}))
    assert problems == ["guardrail_source: required when guardrails_policy.mode is observe or enforce"]
    problems = problems_of(
        with_changes(
            guardrail_source={"kind": "registry", "base_url": "http://r/api", "bearer_token_file": "t"},
            guardrail_state={"kind": "redis", "url": "redis://x"},
        )
    )
    assert problems == [
        "guardrail_source.base_url: must be a bare service root when paired with a redis guardrail_state"
    ]
    (problem,) = problems_of(with_changes(guardrails_policy={"mode": "off", "refresh_interval_secs": 0}))
    assert problem.startswith("guardrails_policy.refresh_interval_secs")
    (problem,) = problems_of(
        with_changes(
            guardrails_policy={"mode": "observe", "phases": ["request"]},
            guardrail_source={"kind": "file", "path": "b", "verification": {"allow_unsigned": True}},
        )
    )
    assert "harness-only" in problem


def test_spend_and_budget_checks() -> None:
    (problem,) = problems_of(with_changes(spend={"admission": {"unpriced_model": "estimate"}}))
    assert "estimate_usd_per_request" in problem
    (problem,) = problems_of(with_changes(spend={"budget_timezone": "Mars/Base"}))
    assert problem.startswith("spend.budget_timezone")
    (problem,) = problems_of(with_changes(rate_limits=[{"name": "l", "budget_usd_per_month": 5}]))
    assert problem == "rate_limits[0].budget_usd_per_month: needs destination pricing or plugins.cost_model"
    loaded = validate_document(
        with_changes(
            rate_limits=[{"name": "l", "qpm": 5, "budget_usd_per_day": 1}],
            plugins={"cost_model": {"name": "c", "kind": "seed"}},
        )
    )
    assert any("budget_usd_per_day is deprecated" in warning for warning in loaded.warnings)


def test_non_loopback_admin_needs_a_token() -> None:
    assert problems_of(with_changes(server={"admin_listen": "0.0.0.0:9099"})) == [
        "server.admin_listen: a non-loopback admin listener requires server.admin_token_file"
    ]
    validate_document(with_changes(server={"admin_listen": "0.0.0.0:9099", "admin_token_file": "t"}))
    assert problems_of(with_changes(server={"listen": "8080"}))[0].startswith("server.listen")


def test_legacy_document_expands_with_a_deprecation_warning() -> None:
    loaded = validate_document(
        {
            "legacy_mcp_gateway": {
                "listen": "127.0.0.1:7000",
                "servers": [{"name": "docs", "url": "http://docs.internal/mcp", "token_env": "DOCS_TOKEN"}],
            }
        }
    )
    config = loaded.config
    assert config.server.listen == "127.0.0.1:7000"
    assert config.destinations["docs"].kind == "mcp" and config.vaults[0].env_var == "DOCS_TOKEN"
    assert config.routes[0].match.path == "/v1/mcp"
    assert any("deprecated" in warning for warning in loaded.warnings)


def test_legacy_is_exclusive() -> None:
    assert problems_of({"legacy_mcp_gateway": {"servers": []}, "routes": []}) == [
        "legacy_mcp_gateway: mutually exclusive with every other top-level key (found: routes)"
    ]
    assert "nonempty `servers`" in problems_of({"legacy_mcp_gateway": {"servers": []}})[0]


def test_yaml_file_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "gw.yaml").write_text(
        yaml.safe_dump(with_changes(vaults=[{"name": "v", "resolver": "static_file", "file": "secrets.yaml"}]))
    )
    loaded = load_config_file(str(tmp_path / "gw.yaml"))
    assert loaded.config.vaults[0].file == str(tmp_path / "secrets.yaml")
    assert live_problems(loaded.config)[0].startswith("vaults[0].file: cannot read vault file")


def test_unparseable_yaml_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "gw.yaml").write_text("routes: [")
    with pytest.raises(ConfigError) as raised:
        load_config_file(str(tmp_path / "gw.yaml"))
    assert raised.value.problems[0].startswith("(document): cannot parse")


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gw")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return directory / "cert.pem", directory / "key.pem"


def test_live_validation_of_files_keys_and_vaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    (tmp_path / "bad.pem").write_text("-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n")
    (tmp_path / "keys.yaml").write_text("keys: [{sha256: abc, principal: p}]")
    (tmp_path / "vault.yaml").write_text("other: secret")
    monkeypatch.setenv("VAULT__E__E", "sk")
    document = with_changes(
        server={"tls": {"cert": str(cert), "key": str(key)}},
        identity={
            "validators": [
                {"name": "k", "kind": "api_key", "keys_file": "keys.yaml"},
                {
                    "name": "j",
                    "kind": "jwt",
                    "static_public_key_pem": "bad.pem",
                    "insecure_allow_any_issuer": True,
                    "insecure_allow_any_audience": True,
                },
            ]
        },
        vaults=[{"name": "e", "resolver": "env"}, {"name": "f", "resolver": "static_file", "file": "vault.yaml"}],
        destinations={
            "a": {"kind": "vendor_a", "credentials": {"vault": "e"}},
            "b": {"kind": "vendor_b", "credentials": {"vault": "f", "credential_id": "mine"}},
        },
        routes=[],
    )
    config: GatewayConfig = validate_document(document, base_dir=str(tmp_path)).config
    problems = live_problems(config)
    assert [problem.split(":")[0] for problem in problems] == [
        "identity.validators[0].keys_file",
        "identity.validators[1].static_public_key_pem",
        "destinations.b.credentials",
    ]
    assert "keys[0].sha256 must be a hex SHA-256 digest" in problems[0]
