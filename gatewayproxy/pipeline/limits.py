"""Rate limits and spend budgets (`rate_limits`, `spend`): admission on an estimate, settlement on real usage.

One limit applies to a request: the one whose `match.scope` holds with the most dimensions (ties: config
order). Its windows (`qpm`, `qph`, `tpm`, `tph`) and budgets (`budget_usd_per_month`, deprecated
`budget_usd_per_day`) are taken together, all or nothing, from the `rate_limiter` plugin's store; token and
spend amounts are reserved on an estimate and corrected in `settle`, off the request path.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo

from gatewayproxy.config.models import Admission, GatewayConfig, RateLimit, Spend
from gatewayproxy.context import Operation, RequestContext, Usage
from gatewayproxy.errors import ErrorCode, GatewayError
from gatewayproxy.pipeline.deps import StageDeps
from gatewayproxy.pipeline.pricing import Pricer
from gatewayproxy.pipeline.stages import Stage
from gatewayproxy.plugins.rate_limiters import (
    MICRO_USD,
    REQUESTS,
    TOKENS,
    Charge,
    Decision,
    LimiterMetrics,
    LimiterUnavailable,
    LocalStore,
    RedisWindowStore,
    build_store,
)
from gatewayproxy.server import workers

NAME = "limits"
MINUTE_MS, HOUR_MS = 60_000, 3_600_000
MICRO_USD_PER_USD = 1_000_000
# A rough, cheap input estimate: about four bytes of request body per token.
BYTES_PER_TOKEN = 4
MAX_OUTPUT_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
TOKEN_FREE_OPERATIONS = (Operation.MCP,)
UNBUDGETED_OPERATIONS = (Operation.MCP, Operation.NATIVE)


@dataclass(frozen=True)
class Period:
    """A calendar period of a budget: its id (part of the counter key) and when it ends (epoch seconds)."""

    id: str
    ends_at: float


def _next_month(start: datetime) -> datetime:
    return start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)


class Calendar:
    """The current day and month in `spend.budget_timezone`, recomputed only when a period ends."""

    def __init__(self, timezone: str) -> None:
        self.zone = ZoneInfo(timezone)
        self._periods: dict[str, Period] = {}

    def period(self, unit: str, now: float) -> Period:
        """The current `day` or `month`."""
        period = self._periods.get(unit)
        if period is None or now >= period.ends_at:
            period = self._periods[unit] = self._compute(unit, now)
        return period

    def _compute(self, unit: str, now: float) -> Period:
        local = datetime.fromtimestamp(now, self.zone)
        if unit == "day":
            start = local.replace(hour=0, minute=0, second=0, microsecond=0)
            # Aware arithmetic is wall-clock arithmetic, so a DST day still ends at local midnight.
            return Period(start.strftime("%Y-%m-%d"), (start + timedelta(days=1)).timestamp())
        start = local.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return Period(start.strftime("%Y-%m"), _next_month(start).timestamp())


@dataclass(frozen=True)
class Estimate:
    """What admission reserved: tokens and micro-USD."""

    tokens: int
    micro_usd: int


@dataclass(frozen=True)
class Admitted:
    """A request's charges and where they were counted, kept in `context.notes` until `settle`."""

    charges: tuple[Charge, ...]
    decision: Decision
    estimate: Estimate


def estimate_tokens(context: RequestContext, admission: Admission) -> int:
    """Input tokens estimated from the body plus the request's output maximum (or the configured default)."""
    if context.operation in TOKEN_FREE_OPERATIONS:
        return 0
    return _input_estimate(context) + _output_estimate(context, admission)


def _input_estimate(context: RequestContext) -> int:
    return math.ceil(len(context.request.body) / BYTES_PER_TOKEN)


def _output_estimate(context: RequestContext, admission: Admission) -> int:
    if context.operation is Operation.EMBEDDINGS:
        return 0
    for key in MAX_OUTPUT_KEYS:
        value = context.body.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return admission.default_max_output_tokens


def micro_usd(amount: float) -> int:
    """USD to whole micro-dollars, rounded up so a reservation never falls short."""
    return math.ceil(amount * MICRO_USD_PER_USD - 1e-6)


class CompiledLimit:
    """One `rate_limits` entry with its windows laid out."""

    def __init__(self, limit: RateLimit) -> None:
        self.name = limit.name
        self.scope = dict(limit.match.scope)
        self.request_windows = [
            (unit, count, window)
            for unit, count, window in (("qpm", limit.qpm, MINUTE_MS), ("qph", limit.qph, HOUR_MS))
            if count
        ]
        self.token_windows = [
            (unit, count, window)
            for unit, count, window in (("tpm", limit.tpm, MINUTE_MS), ("tph", limit.tph, HOUR_MS))
            if count
        ]
        self.budgets = [
            (unit, micro_usd(usd))
            for unit, usd in (("month", limit.budget_usd_per_month), ("day", limit.budget_usd_per_day))
            if usd
        ]

    def holds(self, scope: dict[str, str]) -> bool:
        """Whether every scope pair of the match holds for the principal."""
        return all(scope.get(dim) == value for dim, value in self.scope.items())


@dataclass(frozen=True)
class Headroom:
    """The response headers' view of one request's charges."""

    limit: int
    remaining: int


class LimitsStage(Stage):
    """Admits a request against its limit's windows and budgets; settles tokens and spend on the real usage."""

    name = NAME

    def __init__(self, config: GatewayConfig, store: LocalStore | RedisWindowStore, pricer: Pricer) -> None:
        self.limits = [CompiledLimit(limit) for limit in config.rate_limits]
        self.spend: Spend = config.spend
        self.store = store
        self.pricer = pricer
        self.calendar = Calendar(config.spend.budget_timezone)
        self._pending: set[asyncio.Task[None]] = set()

    def match(self, scope: dict[str, str]) -> CompiledLimit | None:
        """The limit with the most scope dimensions that holds; ties go to config order."""
        best: CompiledLimit | None = None
        for limit in self.limits:
            if limit.holds(scope) and (best is None or len(limit.scope) > len(best.scope)):
                best = limit
        return best

    def bucket_key(self, limit: CompiledLimit, scope: dict[str, str]) -> str:
        """The limit name plus the principal's values of `spend.key_dims` (empty: every scope dimension); in braces,
        so that every counter of a bucket hashes to one Redis Cluster slot."""
        dims = self.spend.key_dims or sorted(scope)
        parts = [quote(limit.name, safe=""), *(f"{dim}={quote(scope.get(dim, ''), safe='')}" for dim in dims)]
        return "{" + ":".join(parts) + "}"

    async def admit(self, context: RequestContext) -> None:
        limit = self.match(context.scope)
        if limit is None:
            return
        budgeted = bool(limit.budgets) and context.operation not in UNBUDGETED_OPERATIONS and context.plan is not None
        estimate = Estimate(
            estimate_tokens(context, self.spend.admission) if limit.token_windows else 0,
            self._reservation(context) if budgeted else 0,
        )
        charges = self._charges(limit, self.bucket_key(limit, context.scope), estimate, budgeted)
        if not charges:
            return
        try:
            decision = await self.store.acquire(charges)
        except LimiterUnavailable as error:
            raise GatewayError(ErrorCode.OVERLOADED, str(error)) from None
        if not decision.allowed:
            raise _refusal(charges[decision.denied], decision.retry_after)
        context.notes[NAME] = Admitted(charges, decision, estimate)
        if self.spend.headers.enabled:
            context.response_headers += headroom_headers(charges, decision)

    def _charges(self, limit: CompiledLimit, key: str, estimate: Estimate, budgeted: bool) -> tuple[Charge, ...]:
        charges = [Charge(f"{key}:{unit}", REQUESTS, count, 1, window) for unit, count, window in limit.request_windows]
        charges += [
            Charge(f"{key}:{unit}", TOKENS, count, estimate.tokens, window)
            for unit, count, window in limit.token_windows
            if estimate.tokens
        ]
        if budgeted:
            now = time.time()
            for unit, cap in limit.budgets:
                period = self.calendar.period(unit, now)
                resets_in_ms = max(math.ceil((period.ends_at - now) * 1000), 1)
                charges.append(Charge(f"{key}:{unit}:{period.id}", MICRO_USD, cap, estimate.micro_usd, 0, resets_in_ms))
        return tuple(charges)

    def _reservation(self, context: RequestContext) -> int:
        """The most the request can cost: the estimate at the dearest target of the plan (micro-USD)."""
        assert context.plan is not None
        admission = self.spend.admission
        usage = Usage(input_tokens=_input_estimate(context), output_tokens=_output_estimate(context, admission))
        costs = []
        for target in context.plan.targets:
            cost = self.pricer.estimate(target.destination, context.model, usage)
            costs.append(self._unpriced_cost(target.destination, context.model) if cost is None else cost)
        return micro_usd(max(costs, default=0.0))

    def _unpriced_cost(self, destination: str, model: str | None) -> float:
        """`spend.admission.unpriced_model`: refuse, reserve the configured estimate, or let it through untracked."""
        admission = self.spend.admission
        if admission.unpriced_model == "deny":
            raise GatewayError(
                ErrorCode.UNPRICED_MODEL,
                f"model {model!r} has no price at destination {destination!r} and a spend budget applies",
            )
        if admission.unpriced_model == "estimate":
            return admission.estimate_usd_per_request or 0.0
        return 0.0

    def settle(self, context: RequestContext) -> None:
        admitted: Admitted | None = context.notes.get(NAME)
        if admitted is None:
            return
        deltas = [self._delta(charge, admitted.estimate, context) for charge in admitted.charges]
        if not any(deltas):
            return
        task = asyncio.get_running_loop().create_task(
            admitted.decision.store.adjust(admitted.charges, deltas, admitted.decision.stamp)
        )
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _delta(self, charge: Charge, estimate: Estimate, context: RequestContext) -> int:
        """Real minus reserved for one charge: tokens for token windows, micro-USD for budgets."""
        if charge.unit == MICRO_USD:
            return micro_usd(self._actual_cost(context)) - estimate.micro_usd
        if charge.unit == TOKENS:
            usage = context.usage
            return (usage.input_tokens + usage.output_tokens if usage else 0) - estimate.tokens
        return 0

    def _actual_cost(self, context: RequestContext) -> float:
        """The priced cost; a served request at an unpriced destination costs the `estimate` amount."""
        if context.cost_usd is not None:
            return context.cost_usd
        admission = self.spend.admission
        served = context.usage is not None and context.destination is not None
        if served and admission.unpriced_model == "estimate":
            return admission.estimate_usd_per_request or 0.0
        return 0.0

    async def close(self) -> None:
        """Let queued settlements finish, then close the store's connections."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        if isinstance(self.store, RedisWindowStore):
            await self.store.close()


def _refusal(charge: Charge, retry_after: float) -> GatewayError:
    """429 `rate_limited` or `budget_exceeded` with `retry-after` in whole seconds."""
    code = ErrorCode.BUDGET_EXCEEDED if charge.unit == MICRO_USD else ErrorCode.RATE_LIMITED
    what = "spend budget" if charge.unit == MICRO_USD else f"{charge.unit} rate limit"
    seconds = max(math.ceil(retry_after), 1)
    return GatewayError(
        code, f"{what} exceeded; retry in {seconds} s", headers=((b"retry-after", str(seconds).encode()),)
    )


def headroom_headers(charges: tuple[Charge, ...], decision: Decision) -> list[tuple[bytes, bytes]]:
    """`x-ratelimit-*` (the tightest request and token windows) and `x-budget-remaining-usd` (the tightest budget)."""
    headers: list[tuple[bytes, bytes]] = []
    units: dict[str, list[Headroom]] = {REQUESTS: [], TOKENS: [], MICRO_USD: []}
    for charge, remaining in zip(charges, decision.remaining, strict=True):
        units[charge.unit].append(Headroom(charge.limit, max(remaining, 0)))
    for unit in (REQUESTS, TOKENS):
        if units[unit]:
            tightest = min(units[unit], key=lambda headroom: headroom.remaining)
            headers += [
                (f"x-ratelimit-limit-{unit}".encode(), str(tightest.limit).encode()),
                (f"x-ratelimit-remaining-{unit}".encode(), str(tightest.remaining).encode()),
            ]
    if units[MICRO_USD]:
        usd = min(headroom.remaining for headroom in units[MICRO_USD]) / MICRO_USD_PER_USD
        headers.append((b"x-budget-remaining-usd", f"{usd:.6f}".encode()))
    return headers


def build(deps: StageDeps) -> list[Stage]:
    """The cost model's refresher and, when `rate_limits` are configured, the limits stage."""
    stages: list[Stage] = list(deps.pricer.stages(deps.metrics))
    if not deps.config.rate_limits:
        return stages
    metrics = deps.shared.get("limits.metrics", lambda: LimiterMetrics(deps.metrics.registry))
    plugin = deps.config.plugins.rate_limiter
    fallback_key = f"limits.fallback.{plugin.name}" if plugin is not None else "limits.fallback"
    store = build_store(
        plugin, deps.shared.get("limits.local", LocalStore), deps.shared.get(fallback_key, LocalStore), metrics
    )
    worker = workers.current()
    if isinstance(store, LocalStore) and worker is not None and worker.index == 0:
        deps.shared.get("limits.per_process_warning", lambda: _warn_per_process(worker.count))
    return [*stages, LimitsStage(deps.config, store, deps.pricer)]


def _warn_per_process(count: int) -> bool:
    logging.getLogger("gatewayproxy.limits").warning(
        "rate_limits are counted per worker process by the local limiter: with %d workers a caller may get up to "
        "%d times each limit; configure plugins.rate_limiter kind redis_window to share them",
        count,
        count,
    )
    return True
