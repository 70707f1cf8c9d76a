"""Prices: every price field in a cost, the resolution order (destination over cost model, upstream id over client
id, provider entry over bare entry), each cost model kind, bad options at boot, and the admin resolve endpoint."""

from __future__ import annotations

import asyncio
import logging
from datetime import date
from http.server import ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from fakes.http_server import LoopbackHttpServer, QuietHandler
from gatewayproxy.adapters.usage import messages_usage
from gatewayproxy.config.loader import ConfigError, load_config_file, validate_document
from gatewayproxy.config.models import Pricing
from gatewayproxy.context import Usage
from gatewayproxy.metrics import GatewayMetrics
from gatewayproxy.pipeline.pricing import Pricer, usage_cost
from gatewayproxy.pipeline.stages import SharedParts
from gatewayproxy.server.upstream import UpstreamPool
from gatewayproxy.state import build_state
from tests.support.gateway.limits import CHAT, poll
from tests.support.gateway.limits import document as limits_document
from tests.support.gateway.provider import FakeProvider
from tests.support.gateway.thread import GatewayFactory, GatewayThread
from tests.support.live import free_port

EVERY_FIELD = Pricing(
    input_per_1m=1,
    output_per_1m=2,
    cache_read_per_1m=0.5,
    cache_write_per_1m=3,
    cache_write_1h_per_1m=4,
    reasoning_output_per_1m=5,
    per_request_usd=0.01,
)
USAGE = Usage(
    input_tokens=1_000_000,
    output_tokens=600_000,
    cache_read_tokens=200_000,
    cache_write_tokens=100_000,
    reasoning_tokens=100_000,
)
REGISTRY_PATH = "/apis/pricing.registry.local/v1/modelprices"
DATASET = f"genai-prices@{version('genai-prices')}"


async def no_fetch(url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
    raise AssertionError("a fixed table fetches nothing")


def config(cost_model: dict[str, Any] | None = None, **destination: Any) -> dict[str, Any]:
    plugins = {"cost_model": {"name": "prices", **cost_model}} if cost_model else {}
    return {
        "vaults": [{"name": "v", "resolver": "env", "env_var": "PATH"}],
        "destinations": {
            "a": {"kind": "vendor_a", "credentials": {"vault": "v"}, **destination},
            "b": {"kind": "vendor_b", "credentials": {"vault": "v"}},
        },
        "plugins": plugins,
    }


def pricer(cost_model: dict[str, Any] | None = None, **destination: Any) -> Pricer:
    return Pricer(validate_document(config(cost_model, **destination)).config, no_fetch)


def test_every_price_field_in_a_chat_shaped_cost() -> None:
    # Cached tokens are inside the input and reasoning inside the output: 700k plain input, 500k plain output.
    expected = (700_000 * 1 + 200_000 * 0.5 + 100_000 * 3 + 500_000 * 2 + 100_000 * 5) / 1e6 + 0.01
    assert usage_cost(EVERY_FIELD, USAGE, cache_inside_input=True) == pytest.approx(expected)


def test_messages_shaped_cache_tokens_are_counted_apart() -> None:
    expected = (1_000_000 * 1 + 200_000 * 0.5 + 100_000 * 3 + 500_000 * 2 + 100_000 * 5) / 1e6 + 0.01
    assert usage_cost(EVERY_FIELD, USAGE, cache_inside_input=False) == pytest.approx(expected)


def test_one_hour_cache_writes_have_their_own_rate() -> None:
    usage = Usage(input_tokens=1_000_000, cache_write_tokens=300_000, cache_write_1h_tokens=100_000)
    expected = (1_000_000 * 1 + 200_000 * 3 + 100_000 * 4) / 1e6 + 0.01
    assert usage_cost(EVERY_FIELD, usage, cache_inside_input=False) == pytest.approx(expected)
    # Without a one-hour rate they cost what other cache writes cost.
    assert usage_cost(Pricing(input_per_1m=1, cache_write_per_1m=3), usage, cache_inside_input=False) == pytest.approx(
        (1_000_000 * 1 + 300_000 * 3) / 1e6
    )


def test_messages_usage_reads_the_one_hour_cache_writes() -> None:
    usage = messages_usage(
        {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 30,
            "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 10},
        }
    )
    assert usage == Usage(input_tokens=10, output_tokens=5, cache_write_tokens=30, cache_write_1h_tokens=10)


def test_missing_rates_fall_back_to_their_kin() -> None:
    pricing = Pricing(input_per_1m=1, output_per_1m=2)
    # Cache reads and writes at the input rate, reasoning at the output rate, nothing per request.
    assert usage_cost(pricing, USAGE, cache_inside_input=True) == pytest.approx((1_000_000 * 1 + 600_000 * 2) / 1e6)
    assert usage_cost(Pricing(per_request_usd=0.2), USAGE, cache_inside_input=True) == pytest.approx(0.2)


def test_destination_fields_override_the_cost_model_field_by_field() -> None:
    table = {"m": {"input_per_1m": 1, "output_per_1m": 2, "cache_read_per_1m": 0.1}}
    prices = pricer({"kind": "static_table", "table": table}, pricing={"output_per_1m": 9, "per_request_usd": 0.5})
    resolved = prices.resolve("a", "m")
    assert resolved is not None
    assert resolved.pricing == Pricing(input_per_1m=1, output_per_1m=9, cache_read_per_1m=0.1, per_request_usd=0.5)
    assert resolved.sources == {
        "input_per_1m": "static_table:prices",
        "output_per_1m": "destination:a",
        "cache_read_per_1m": "static_table:prices",
        "per_request_usd": "destination:a",
    }
    assert prices.cost("a", "m", Usage(input_tokens=1_000_000)) == pytest.approx(1.5)
    assert prices.cost("a", "m", None) is None


def test_upstream_id_first_then_client_id_and_provider_entries_first() -> None:
    table = {"client": {"input_per_1m": 1}, "upstream": {"input_per_1m": 2}, "vendor_b/client": {"input_per_1m": 3}}
    prices = pricer({"kind": "static_table", "table": table}, model_map={"client": "upstream"})
    assert prices.cost("a", "client", Usage(input_tokens=1_000_000)) == pytest.approx(2)  # mapped id wins
    assert prices.cost("b", "client", Usage(input_tokens=1_000_000)) == pytest.approx(3)  # provider entry wins
    assert prices.cost("a", "unknown", Usage(input_tokens=1)) is None
    assert prices.cost("nowhere", "client", Usage(input_tokens=1)) is None


def test_seed_table_prices_the_neutral_example_ids() -> None:
    resolved = pricer({"kind": "seed"}).resolve("b", "claude-sonnet")
    assert resolved is not None and resolved.source == "seed:prices"
    assert resolved.pricing.input_per_1m == 3.0 and resolved.pricing.cache_write_1h_per_1m == 6.0


def test_seed_dataset_has_date_effective_prices() -> None:
    from gatewayproxy.plugins.cost_models import SeedModel

    seed = SeedModel("prices")
    # The dataset records Bedrock's 2026-07-30 price cut of this model; each day sees its own price.
    before = seed.dataset_lookup("vendor_d", "us.openai.gpt-5.6-luna", on=date(2026, 7, 20))
    after = seed.dataset_lookup("vendor_d", "us.openai.gpt-5.6-luna", on=date(2026, 8, 20))
    assert before is not None and after is not None
    assert before[0].input_per_1m == 1.1 and after[0].input_per_1m == 0.22
    assert before[1] == f"seed:prices/{DATASET}"


def test_static_table_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("models:\n  m: {input_per_1m: 4, output_per_1m: 8}\n")
    prices = pricer({"kind": "static_table", "file": str(path)})
    assert prices.cost("a", "m", Usage(input_tokens=500_000, output_tokens=500_000)) == pytest.approx(6)


def test_a_relative_table_file_is_found_beside_the_config(tmp_path: Path) -> None:
    (tmp_path / "prices.yaml").write_text("models:\n  m: {input_per_1m: 4, output_per_1m: 8}\n")
    document = config({"kind": "static_table", "file": "prices.yaml"})
    (tmp_path / "gateway.yaml").write_text(yaml.safe_dump(document))
    state = build_state(
        load_config_file(str(tmp_path / "gateway.yaml")), UpstreamPool(), SharedParts(), GatewayMetrics()
    )
    assert state.pricer.cost("a", "m", Usage(input_tokens=500_000, output_tokens=500_000)) == pytest.approx(6)


def test_layered_first_hit_wins() -> None:
    layers = [
        {"name": "mine", "kind": "static_table", "table": {"claude-sonnet": {"input_per_1m": 99}}},
        {"name": "base", "kind": "seed"},
    ]
    prices = pricer({"kind": "layered", "layers": layers})
    sonnet, four_o = prices.resolve("a", "claude-sonnet"), prices.resolve("a", "gpt-4o")
    assert sonnet is not None and sonnet.pricing.input_per_1m == 99
    assert sonnet.source == "layered:prices/static_table:mine"
    assert (
        four_o is not None
        and four_o.pricing.input_per_1m == 2.5
        and four_o.source == f"layered:prices/seed:base/{DATASET}"
    )


@pytest.mark.parametrize(
    ("plugins", "problem"),
    [
        (
            {"cost_model": {"name": "c", "kind": "static_table", "file": "x", "table": {"m": {}}}},
            "plugins.cost_model: give `file` or `table`, not both",
        ),
        (
            {"cost_model": {"name": "c", "kind": "static_table", "table": {"m": {"inptu_per_1m": 1}}}},
            "plugins.cost_model.table.m.inptu_per_1m: unknown key",
        ),
        (
            {"cost_model": {"name": "c", "kind": "static_table", "file": "/nonexistent/prices.yaml"}},
            "plugins.cost_model.file: cannot read a price table from /nonexistent/prices.yaml",
        ),
        ({"cost_model": {"name": "c", "kind": "seed", "refresh": 1}}, "plugins.cost_model.refresh: unknown key"),
        (
            {
                "cost_model": {
                    "name": "c",
                    "kind": "layered",
                    "layers": [{"name": "s", "kind": "seed"}, {"name": "h", "kind": "http_refresh"}],
                }
            },
            "plugins.cost_model.layers[1].url: Field required",
        ),
        ({"rate_limiter": {"name": "r", "kind": "redis_window"}}, "plugins.rate_limiter.url: Field required"),
        (
            {"rate_limiter": {"name": "r", "kind": "token_bucket", "url": "redis://x"}},
            "plugins.rate_limiter.url: unknown key",
        ),
    ],
)
def test_bad_plugin_options_fail_state_construction_naming_the_key(plugins: dict[str, Any], problem: str) -> None:
    document = {**config(), "plugins": plugins, "rate_limits": [{"name": "r", "qpm": 1}]}
    loaded = validate_document(document)
    with pytest.raises(ConfigError) as raised:
        build_state(loaded, UpstreamPool(), SharedParts(), GatewayMetrics())
    assert any(found.startswith(problem) for found in raised.value.problems), raised.value.problems


def resolve(gateway: GatewayThread, **query: str) -> httpx.Response:
    return httpx.get(f"{gateway.admin_url}/admin/v1/pricing/resolve", params=query)


def test_http_refresh_keeps_the_last_good_table(
    gateway_factory: GatewayFactory, primary: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    primary.documents["/prices.json"] = {"m": {"input_per_1m": 1, "output_per_1m": 2}}
    cost_model = {"kind": "http_refresh", "url": f"{primary.url}/prices.json", "refresh_interval_secs": 0.05}
    caplog.set_level(logging.INFO, logger="gatewayproxy.pricing")
    gateway = gateway_factory(config(cost_model))
    first = resolve(gateway, provider="vendor_a", model="m").json()
    del primary.documents["/prices.json"]  # the next refreshes answer 404
    fetches = len(primary.received)
    assert poll(lambda: len(primary.received) >= fetches + 3 and refresh_failures(gateway) >= 3)
    kept = resolve(gateway, provider="vendor_a", model="m").json()
    assert len(outage_lines(caplog)) == 1  # an outage of several failed fetches is one log line
    primary.documents["/prices.json"] = {"m": {"input_per_1m": 7}}
    changed = poll(
        lambda: (
            (found := resolve(gateway, provider="vendor_a", model="m").json())["pricing"] == {"input_per_1m": 7}
            and found
        )
    )
    assert first["pricing"] == {"input_per_1m": 1, "output_per_1m": 2} and first["source"] == "http_refresh:prices"
    assert kept["pricing"] == first["pricing"]
    assert changed
    assert any("price refresh recovered" in record.getMessage() for record in caplog.records)


def test_registry_prices_are_fetched_with_the_bearer_token(
    gateway_factory: GatewayFactory, primary: FakeProvider, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text("registry-token\n")
    primary.documents[REGISTRY_PATH] = {
        "data": [
            {
                "id": "1",
                "type": "model_price",
                "provider": "vendor_a",
                "model": "m",
                "input_per_1m": 2,
                "output_per_1m": 4,
                "cache_read_per_1m": None,
                "cache_write_per_1m": None,
                "effective_from": "2025-01-01T00:00:00Z",
                "created_at": "2025-01-01T00:00:00Z",
            }
        ],
        "next_page": None,
    }
    cost_model = {"kind": "registry", "base_url": primary.url, "bearer_token_file": str(tmp_path / "token")}
    gateway = gateway_factory(config(cost_model))
    found = resolve(gateway, provider="vendor_a", model="m")
    other_provider = resolve(gateway, provider="vendor_b", model="m")
    assert found.json()["pricing"] == {"input_per_1m": 2, "output_per_1m": 4}
    assert found.json()["source"] == "registry:prices"
    assert other_provider.status_code == 404
    fetch = next(request for request in primary.received if request.path == REGISTRY_PATH)
    assert fetch.headers["authorization"] == "Bearer registry-token"


def test_resolve_endpoint_answers(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    document = config({"kind": "seed"}, pricing={"input_per_1m": 0.5})
    gateway = gateway_factory(document)
    at_destination = resolve(gateway, provider="vendor_a", model="gpt-4o", destination="a")
    by_provider = resolve(gateway, provider="vendor_b", model="gpt-4o")
    unknown = resolve(gateway, provider="vendor_b", model="nothing-like-it")
    missing = resolve(gateway, provider="vendor_a")
    wrong_provider = resolve(gateway, provider="vendor_b", model="gpt-4o", destination="a")
    assert at_destination.status_code == 200
    assert at_destination.json() == {
        "provider": "vendor_a",
        "model": "gpt-4o",
        "destination": "a",
        "source": f"destination:a+seed:prices/{DATASET}",
        "pricing": {"input_per_1m": 0.5, "output_per_1m": 10.0, "cache_read_per_1m": 1.25},
        "sources": {
            "input_per_1m": "destination:a",
            "output_per_1m": f"seed:prices/{DATASET}",
            "cache_read_per_1m": f"seed:prices/{DATASET}",
        },
    }
    assert by_provider.json()["destination"] is None and by_provider.json()["source"] == "seed:prices"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid_request"
    assert wrong_provider.status_code == 400


def test_resolve_without_a_cost_model(gateway_factory: GatewayFactory, primary: FakeProvider) -> None:
    gateway = gateway_factory(config(pricing={"input_per_1m": 0.5}))
    unavailable = resolve(gateway, provider="vendor_a", model="m")
    own_pricing = resolve(gateway, provider="vendor_a", model="m", destination="a")
    unpriced = resolve(gateway, provider="vendor_b", model="m", destination="b")
    assert unavailable.status_code == 503 and unavailable.json()["error"]["code"] == "pricing_unavailable"
    assert own_pricing.json()["pricing"] == {"input_per_1m": 0.5}
    assert unpriced.status_code == 503


def test_cost_is_cheap_and_follows_table_changes() -> None:
    prices = pricer({"kind": "static_table", "table": {"m": {"input_per_1m": 1}}})
    usage = Usage(input_tokens=1_000_000)
    assert prices.cost("a", "m", usage) == pytest.approx(1)
    assert prices.cost_model is not None
    prices.cost_model.replace({"m": Pricing(input_per_1m=3)})
    assert prices.cost("a", "m", usage) == pytest.approx(3)
    asyncio.run(prices.cost_model.close())


# Real upstream ids of five provider kinds, dated ones included, and the list prices the dataset gives them.
REAL_MODELS = [
    ("vendor_a", "gpt-4o-mini-2024-07-18", 0.15, 0.6, 0.075, None),
    ("vendor_a", "gpt-4o", 2.5, 10, 1.25, None),
    ("vendor_a", "gpt-4.1", 2, 8, 0.5, None),
    ("vendor_a", "o3-mini", 1.1, 4.4, 0.55, None),
    ("vendor_a", "o1", 15, 60, 7.5, None),
    ("vendor_b", "claude-3-5-sonnet-20241022", 3, 15, 0.3, 3.75),
    ("vendor_b", "claude-sonnet-4-5", 3, 15, 0.3, 3.75),
    ("vendor_b", "claude-3-5-haiku-20241022", 0.8, 4, 0.08, 1),
    ("vendor_b", "claude-opus-4-1-20250805", 15, 75, 1.5, 18.75),
    ("vendor_b", "claude-3-opus-20240229", 15, 75, 1.5, 18.75),
    ("cloud_vendor_c", "gpt-4o", 2.5, 10, 1.25, None),
    ("cloud_vendor_c", "gpt-4o-mini", 0.15, 0.6, 0.075, None),
    ("cloud_vendor_c", "gpt-35-turbo", 0.5, 1.5, None, None),
    ("cloud_vendor_c", "o3-mini", 1.1, 4.4, 0.55, None),
    ("vendor_d", "anthropic.claude-3-5-sonnet-20241022-v2:0", 3, 15, 0.3, 3.75),
    ("vendor_d", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", 3, 15, 0.3, 3.75),
    ("vendor_d", "amazon.nova-pro-v1:0", 0.8, 3.2, 0.2, None),
    ("vendor_d", "meta.llama3-1-70b-instruct-v1:0", 0.72, 0.72, None, None),
    ("vendor_e", "gemini-1.5-pro-002", 1.25, 5, None, None),
    ("vendor_e", "gemini-2.0-flash-001", 0.1, 0.4, 0.025, None),
    ("vendor_e", "gemini-2.5-pro", 1.25, 10, 0.125, None),
    ("vendor_e", "gemini-2.5-flash", 0.3, 2.5, 0.03, None),
    ("vendor_e", "claude-3-5-sonnet-v2@20241022", 3, 15, 0.3, 3.75),
]


def test_seed_resolves_real_model_ids_of_five_provider_kinds_without_an_operator_table(
    gateway_factory: GatewayFactory,
    primary: FakeProvider,
) -> None:
    gateway = gateway_factory(config({"kind": "seed"}))
    answers = [(row, resolve(gateway, provider=row[0], model=row[1])) for row in REAL_MODELS]
    for (provider, model, input_rate, output_rate, cache_read, cache_write), answer in answers:
        assert answer.status_code == 200, (provider, model, answer.text)
        found = answer.json()
        assert found["source"] == f"seed:prices/{DATASET}", (provider, model)
        assert found["pricing"]["input_per_1m"] == input_rate, (provider, model)
        assert found["pricing"]["output_per_1m"] == output_rate, (provider, model)
        assert found["pricing"].get("cache_read_per_1m") == cache_read, (provider, model)
        assert found["pricing"].get("cache_write_per_1m") == cache_write, (provider, model)
    assert len({provider for provider, *_ in REAL_MODELS}) == 5 and len(REAL_MODELS) >= 20


def test_seed_prices_the_upstream_id_after_model_map_and_operator_tables_override() -> None:
    prices = pricer({"kind": "seed"}, model_map={"mini": "gpt-4o-mini-2024-07-18"})
    resolved = prices.resolve("a", "mini")
    assert resolved is not None and resolved.pricing.input_per_1m == 0.15
    assert resolved.source == f"seed:prices/{DATASET}"
    own = pricer({"kind": "seed"}, pricing={"input_per_1m": 9}).resolve("a", "gpt-4o")
    assert own is not None and own.pricing.input_per_1m == 9 and own.pricing.output_per_1m == 10
    layers = [
        {"name": "mine", "kind": "static_table", "table": {"gpt-4o": {"input_per_1m": 99}}},
        {"name": "base", "kind": "seed"},
    ]
    table_first = pricer({"kind": "layered", "layers": layers}).resolve("a", "gpt-4o")
    assert table_first is not None and table_first.pricing.input_per_1m == 99


class PriceService:
    """A JSON price table served on a port chosen before it listens (so a gateway can boot against it down)."""

    def __init__(self, port: int, table: dict[str, Any]) -> None:
        self.port = port
        self.table = table
        self._server: LoopbackHttpServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/prices.json"

    def start(self) -> None:
        table = self.table

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                self.reply_json(200, table)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = LoopbackHttpServer(Handler, port=self.port).start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.stop()


def refresh_failures(gateway: GatewayThread) -> float:
    for line in gateway.metrics_text.splitlines():
        if line.startswith('gateway_price_refresh_failures_total{cost_model="prices"}'):
            return float(line.split()[-1])
    return 0.0


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "price refresh failed" in record.getMessage()]


def test_a_price_service_down_at_boot_is_retried_in_the_background(
    gateway_factory: GatewayFactory, primary: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    service = PriceService(free_port(), {"m": {"input_per_1m": 1, "output_per_1m": 2}})
    cost_model = {"kind": "http_refresh", "url": service.url, "refresh_interval_secs": 300, "retry_secs": 0.05}
    document = limits_document(
        primary,
        rate_limits=[{"name": "spend", "budget_usd_per_month": 1}],
        spend={"headers": {"enabled": True}, "admission": {"unpriced_model": "deny"}},
        plugins={"cost_model": {"name": "prices", **cost_model}},
    )
    caplog.set_level(logging.INFO, logger="gatewayproxy.pricing")
    gateway = gateway_factory(document)
    # The gateway serves with nothing priced: unpriced models are refused as configured.
    refused = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "unpriced_model"
    assert poll(lambda: refresh_failures(gateway) >= 3), "failed fetches are counted"
    assert len(outage_lines(caplog)) == 1  # one line for the whole outage, not one per failed fetch
    service.start()
    try:
        assert poll(lambda: resolve(gateway, provider="vendor_a", model="m").status_code == 200)
        priced = httpx.post(f"{gateway.url}/v1/chat/completions", json=CHAT, timeout=10)
        assert priced.status_code == 200
        assert float(priced.headers["x-budget-remaining-usd"]) < 1
        assert any("price refresh recovered" in record.getMessage() for record in caplog.records)
    finally:
        service.stop()
    assert len(outage_lines(caplog)) == 1
