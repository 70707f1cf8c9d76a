"""The `cost_model` plugin kinds: where model prices come from when a destination has no `pricing` of its own.

`seed` (the maintained `genai-prices` dataset, then a few neutral example ids), `static_table` (a file or an
inline table), `http_refresh` (a JSON table fetched every N seconds), `registry` (the registry's pricing
extension group) and `layered` (first hit wins).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from decimal import Decimal
from importlib.metadata import version
from typing import Any

import orjson
import yaml
from pydantic import Field, model_validator

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.config.models import FilePath, PluginInstance, Pricing
from gatewayproxy.plugins.decisions import PluginOptions, plugin_options
from gatewayproxy.server.tasks import cancel_and_wait
from gatewayproxy.vaults.resolvers import Fetch, read_token_file

logger = logging.getLogger("gatewayproxy.pricing")
PRICE_FIELDS = tuple(Pricing.model_fields)
# Neutral model ids of the examples, at list prices (USD per million tokens); the dataset is asked first.
SEED_TABLE: dict[str, Pricing] = {
    "gpt-4o": Pricing(input_per_1m=2.5, output_per_1m=10.0, cache_read_per_1m=1.25),
    "gpt-4o-mini": Pricing(input_per_1m=0.15, output_per_1m=0.6, cache_read_per_1m=0.075),
    "claude-sonnet": Pricing(
        input_per_1m=3.0, output_per_1m=15.0, cache_read_per_1m=0.3, cache_write_per_1m=3.75, cache_write_1h_per_1m=6.0
    ),
    "claude-haiku-4-5": Pricing(
        input_per_1m=1.0, output_per_1m=5.0, cache_read_per_1m=0.1, cache_write_per_1m=1.25, cache_write_1h_per_1m=2.0
    ),
}
PriceTable = dict[str, Pricing]
Found = tuple[Pricing, str]


class StaticTableOptions(PluginOptions):
    """`static_table`: a YAML/JSON `file` or an inline `table` of `[provider/]model` to prices."""

    file: FilePath | None = None
    table: dict[str, Pricing] = {}

    @model_validator(mode="after")
    def _one_source(self) -> StaticTableOptions:
        if self.file is not None and self.table:
            raise ValueError("give `file` or `table`, not both")
        return self


class RefreshOptions(PluginOptions):
    """Options of every fetched table: refetched every `refresh_interval_secs` (every `retry_secs` while fetches
    fail), each fetch given `timeout_ms`."""

    refresh_interval_secs: float = Field(default=300, gt=0)
    retry_secs: float = Field(default=10, gt=0)
    timeout_ms: int = Field(default=3000, gt=0)


class HttpRefreshOptions(RefreshOptions):
    """`http_refresh`: a JSON table at `url`; the last good one is kept."""

    url: str
    bearer_token_file: FilePath | None = None


class RegistryOptions(RefreshOptions):
    """`registry`: effective prices from `<base_url>/apis/pricing.<group_domain>/v1/modelprices`."""

    base_url: str
    bearer_token_file: FilePath
    group_domain: str = "registry.local"


class LayeredOptions(PluginOptions):
    """`layered`: an ordered list of other cost models; the first that prices a model wins."""

    layers: list[PluginInstance] = Field(min_length=1)


def table_key(provider: str | None, model: str) -> str:
    """The key of a price in a table: `provider/model`, or the bare model id for every provider."""
    return f"{provider}/{model}" if provider else model


def parse_table(document: Any) -> PriceTable:
    """A price table from a document `{[provider/]model: {input_per_1m, ...}}` (optionally under `models`)."""
    if isinstance(document, Mapping) and isinstance(document.get("models"), Mapping):
        document = document["models"]
    if not isinstance(document, Mapping):
        raise ValueError("a price table is a mapping of model id to prices")
    return {str(model): Pricing.model_validate(prices) for model, prices in document.items()}


class CostModel:
    """A source of model prices; `revision` changes whenever its table does."""

    kind = "cost_model"

    def __init__(self, name: str, table: PriceTable | None = None) -> None:
        self.name = name
        self.table: PriceTable = table or {}
        self._revision = 0

    @property
    def revision(self) -> int:
        """Changes whenever the table does (the pricer drops its memo then)."""
        return self._revision

    @property
    def source(self) -> str:
        """How a resolved price names this model: `<kind>:<name>`."""
        return f"{self.kind}:{self.name}"

    def lookup(self, provider: str, model: str) -> Found | None:
        """The prices of `model` at `provider` (a provider-specific entry first) and the source that gave them."""
        found = self.table.get(table_key(provider, model)) or self.table.get(model)
        return (found, self.source) if found is not None else None

    def replace(self, table: PriceTable) -> None:
        """Swap in a new table."""
        self.table = table
        self._revision += 1

    def count_failures(self, failed: Callable[[str], None]) -> None:
        """Have `failed(name)` called on each failed fetch of a price table (a fixed table fetches nothing)."""

    async def start(self) -> None:
        """Start background refreshes (none for a fixed table)."""

    async def close(self) -> None:
        """Stop background refreshes."""


# Our destination kinds and the dataset's provider ids (None: let the dataset guess from the model id).
DATASET_PROVIDERS: dict[str, str | None] = {
    "vendor_a": "openai",
    "vendor_b": "anthropic",
    "cloud_vendor_c": "azure",
    "vendor_d": "aws",
    "vendor_e": "google",
    "vendor_a_compatible": None,
}
# The dataset's price keys (USD per million tokens) and our fields.
DATASET_FIELDS = {
    "input_mtok": "input_per_1m",
    "output_mtok": "output_per_1m",
    "cache_read_mtok": "cache_read_per_1m",
    "cache_write_mtok": "cache_write_per_1m",
    "cache_write_1h_mtok": "cache_write_1h_per_1m",
    "output_reasoning_mtok": "reasoning_output_per_1m",
}


def _base_rate(value: Any) -> float | None:
    """A flat rate, or the base rate of a tiered one (tiers start past the long-context threshold)."""
    if isinstance(value, Decimal):
        return float(value)
    base = getattr(value, "base", None)
    return float(base) if isinstance(base, Decimal) else None


class SeedModel(CostModel):
    """Prices from the `genai-prices` dataset (a pinned package, refreshed by upgrading it), keyed by the
    dataset's provider for our destination kind and the upstream model id (dated ids resolve to their model),
    at the prices in effect today; the neutral example ids of `SEED_TABLE` after it."""

    kind = "seed"
    DATASET = "genai-prices"

    def __init__(self, name: str, table: PriceTable | None = None) -> None:
        super().__init__(name, table)
        # Imported here: loading the dataset takes ~20 ms, paid only by gateways that configure `seed`.
        from genai_prices import data_snapshot

        self._snapshot = data_snapshot.get_snapshot()
        self.dataset = f"{self.DATASET}@{version(self.DATASET)}"

    @property
    def revision(self) -> int:
        """Today's date: date-effective prices change at midnight UTC, so the pricer's memo starts over daily."""
        return datetime.now(UTC).toordinal()

    def lookup(self, provider: str, model: str) -> Found | None:
        found = self.dataset_lookup(provider, model)
        return found if found is not None else super().lookup(provider, model)

    def dataset_lookup(self, provider: str, model: str, on: date | None = None) -> Found | None:
        """The dataset's prices of `model` at our provider kind `provider`, effective on `on` (default today)."""
        if provider not in DATASET_PROVIDERS:
            return None
        try:
            _, info = self._snapshot.find_provider_model(model, None, DATASET_PROVIDERS[provider], None)
        except LookupError:
            return None
        moment = datetime.combine(on, datetime.min.time(), UTC) if on else datetime.now(UTC)
        prices = info.get_prices(moment)
        fields = {ours: _base_rate(getattr(prices, theirs, None)) for theirs, ours in DATASET_FIELDS.items()}
        pricing = Pricing(**{field: rate for field, rate in fields.items() if rate is not None})
        if pricing.input_per_1m is None and pricing.output_per_1m is None:
            return None  # priced by the image, the second or the request only: not a token price
        return pricing, f"{self.source}/{self.dataset}"


class StaticTableModel(CostModel):
    """A fixed table from a file or from the config itself."""

    kind = "static_table"


class RefreshingModel(CostModel):
    """A table fetched at start and every `refresh_interval_secs`; a failed fetch keeps the last good table (empty
    until one was fetched: models are unpriced meanwhile) and is retried every `retry_secs` in the background. An
    outage is logged once, when it starts, and once more when it ends; every failed fetch is counted."""

    def __init__(self, name: str, options: RefreshOptions, fetch: Fetch) -> None:
        super().__init__(name)
        self.options = options
        self._fetch = fetch
        self._interval = options.refresh_interval_secs
        self._retry = min(options.retry_secs, self._interval)
        self._timeout = options.timeout_ms / 1000
        self._task: asyncio.Task[None] | None = None
        self._failed: Callable[[str], None] | None = None
        self.outage = False  # whether the last fetch failed

    def count_failures(self, failed: Callable[[str], None]) -> None:
        self._failed = failed

    def request(self) -> tuple[str, dict[str, str]]:
        """The URL and headers of one fetch."""
        raise NotImplementedError

    def table_of(self, document: Any) -> PriceTable:
        """The price table in a fetched document."""
        return parse_table(document)

    async def refresh(self) -> bool:
        """Fetch once; True when a new table was taken."""
        try:
            url, headers = self.request()
            status, body = await self._fetch(url, headers, self._timeout)
            if status != 200:
                raise ValueError(f"answered {status}")
            table = self.table_of(orjson.loads(body))
        except Exception as error:  # the fetcher's connection and timeout failures, bad statuses and tables alike
            if self._failed is not None:
                self._failed(self.name)
            if not self.outage:
                self.outage = True
                logger.warning(
                    "cost model %s: price refresh failed, keeping the last good table (%d models) and retrying "
                    "every %gs: %s",
                    self.name,
                    len(self.table),
                    self._retry,
                    error,
                )
            return False
        self.replace(table)
        if self.outage:
            self.outage = False
            logger.info("cost model %s: price refresh recovered, %d models priced", self.name, len(table))
        return True

    async def start(self) -> None:
        """Fetch now (the first table; a failure does not stop the boot), then keep refreshing in the
        background."""
        await self.refresh()
        self._task = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self._retry if self.outage else self._interval)
            await self.refresh()

    async def close(self) -> None:
        """Stop refreshing."""
        await cancel_and_wait(self._task)


class HttpRefreshModel(RefreshingModel):
    """A JSON price table served at a URL."""

    kind = "http_refresh"
    options: HttpRefreshOptions

    def request(self) -> tuple[str, dict[str, str]]:
        headers = {"accept": "application/json"}
        if self.options.bearer_token_file:
            headers["authorization"] = "Bearer " + read_token_file(self.options.bearer_token_file)
        return self.options.url, headers


class RegistryModel(RefreshingModel):
    """Effective prices of the registry's `pricing` extension group (bearer token reread on each fetch)."""

    kind = "registry"
    options: RegistryOptions

    def request(self) -> tuple[str, dict[str, str]]:
        root = self.options.base_url.rstrip("/")
        url = f"{root}/apis/pricing.{self.options.group_domain}/v1/modelprices"
        token = read_token_file(self.options.bearer_token_file)
        return url, {"accept": "application/json", "authorization": f"Bearer {token}"}

    def table_of(self, document: Any) -> PriceTable:
        """Rows `{provider, model, <price fields>}` of the `data` list, keyed `provider/model`."""
        rows = document.get("data") if isinstance(document, Mapping) else None
        if not isinstance(rows, list):
            raise ValueError("the registry answered no `data` list")
        return {
            table_key(row.get("provider"), str(row["model"])): Pricing.model_validate(
                {field: row.get(field) for field in PRICE_FIELDS}
            )
            for row in rows
        }


class LayeredModel(CostModel):
    """Other cost models in order; the first that knows a model prices it."""

    kind = "layered"

    def __init__(self, name: str, layers: list[CostModel]) -> None:
        super().__init__(name)
        self.layers = layers

    @property
    def revision(self) -> int:
        """Changes whenever a layer's table does."""
        return sum(layer.revision for layer in self.layers)

    def lookup(self, provider: str, model: str) -> Found | None:
        for layer in self.layers:
            found = layer.lookup(provider, model)
            if found is not None:
                return found[0], f"{self.source}/{found[1]}"
        return None

    def count_failures(self, failed: Callable[[str], None]) -> None:
        for layer in self.layers:
            layer.count_failures(failed)

    async def start(self) -> None:
        for layer in self.layers:
            await layer.start()

    async def close(self) -> None:
        for layer in self.layers:
            await layer.close()


def _static_table(key: str, instance: PluginInstance, fetch: Fetch, base_dir: str | None) -> CostModel:
    options = plugin_options(StaticTableOptions, instance, key, base_dir)
    if options.file is None:
        return StaticTableModel(instance.name, dict(options.table))
    try:
        with open(options.file, encoding="utf-8") as handle:
            return StaticTableModel(instance.name, parse_table(yaml.safe_load(handle)))
    except (OSError, yaml.YAMLError, ValueError) as error:
        raise ConfigError([f"{key}.file: cannot read a price table from {options.file}: {error}"]) from None


def _seed(key: str, instance: PluginInstance, fetch: Fetch, base_dir: str | None) -> CostModel:
    plugin_options(PluginOptions, instance, key, base_dir)
    return SeedModel(instance.name, dict(SEED_TABLE))


def _http_refresh(key: str, instance: PluginInstance, fetch: Fetch, base_dir: str | None) -> CostModel:
    return HttpRefreshModel(instance.name, plugin_options(HttpRefreshOptions, instance, key, base_dir), fetch)


def _registry(key: str, instance: PluginInstance, fetch: Fetch, base_dir: str | None) -> CostModel:
    return RegistryModel(instance.name, plugin_options(RegistryOptions, instance, key, base_dir), fetch)


def _layered(key: str, instance: PluginInstance, fetch: Fetch, base_dir: str | None) -> CostModel:
    options = plugin_options(LayeredOptions, instance, key, base_dir)
    return LayeredModel(
        instance.name,
        [
            build_cost_model(layer, fetch, f"{key}.layers[{index}]", base_dir)
            for index, layer in enumerate(options.layers)
        ],
    )


BUILDERS: dict[str, Callable[[str, PluginInstance, Fetch, str | None], CostModel]] = {
    "seed": _seed,
    "static_table": _static_table,
    "http_refresh": _http_refresh,
    "registry": _registry,
    "layered": _layered,
}


def build_cost_model(
    instance: PluginInstance, fetch: Fetch, key: str = "plugins.cost_model", base_dir: str | None = None
) -> CostModel:
    """The cost model of a plugin instance (relative paths against `base_dir`, the config file's directory);
    raises `ConfigError` naming the key of a bad option."""
    builder = BUILDERS.get(instance.kind)
    if builder is None:
        raise ConfigError(
            [f"{key}.kind: unsupported cost model kind {instance.kind!r}; available kinds: {', '.join(BUILDERS)}"]
        )
    return builder(key, instance, fetch, base_dir)
