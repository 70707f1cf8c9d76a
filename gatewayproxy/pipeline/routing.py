"""Routing: which route serves a request and the ordered plan of targets and attempts it allows."""

from __future__ import annotations

import random
from collections.abc import Mapping

from gatewayproxy.config.globs import Glob, compile_glob
from gatewayproxy.config.models import Condition, Route, Strategy, Target
from gatewayproxy.context import Attempts, Plan, RequestContext


def _field_value(context: RequestContext, field: str) -> str | None:
    """A condition field: `model`, `path`, `header.<name>` or `scope.<dim>`."""
    if field == "model":
        return context.model
    if field == "path":
        return context.request.path
    if field.startswith("header."):
        return context.request.headers.get(field.removeprefix("header.").lower())
    return context.principal.scope.get(field.removeprefix("scope."))


def _globs_hold(globs: Mapping[str, Glob], context: RequestContext) -> bool:
    for field, glob in globs.items():
        value = _field_value(context, field)
        if value is None or not glob(value):
            return False
    return True


class CompiledRoute:
    """A route with its match clauses compiled to predicates."""

    def __init__(self, route: Route) -> None:
        self.route = route
        self.name = route.name
        match = route.match
        globs: dict[str, Glob] = {}
        if match.model is not None:
            globs["model"] = compile_glob(match.model)
        globs.update({f"header.{name.lower()}": compile_glob(value) for name, value in match.header.items()})
        self._globs = globs
        self._path = compile_glob(match.path) if match.path is not None else None  # `/v1/responses/*` holds for ids
        self._scope = dict(match.scope)
        self.specificity = len(match.scope)
        self._conditions = [
            (condition, {field: compile_glob(value) for field, value in condition.if_.items()})
            for condition in route.strategy.conditions
        ]
        self._targets_by_destination = {target.destination: target for target in route.strategy.targets}
        self._attempts = _attempts_of(route)

    def matches(self, context: RequestContext) -> bool:
        """Whether every match clause holds."""
        if self._path is not None and not self._path(context.request.path):
            return False
        scope = context.principal.scope
        if any(scope.get(dim) != value for dim, value in self._scope.items()):
            return False
        return _globs_hold(self._globs, context)

    def plan(self, context: RequestContext) -> Plan:
        """The ordered targets for this request."""
        targets = self._ordered_targets(context)
        if not self.route.idempotency_safe:
            return Plan(self.name, targets[:1], Attempts(1, 0, frozenset(), self._attempts.timeout_seconds))
        return Plan(self.name, targets, self._attempts)

    def _ordered_targets(self, context: RequestContext) -> tuple[Target, ...]:
        strategy = self.route.strategy
        if strategy.mode == "fallback":
            return tuple(strategy.targets)
        if strategy.mode == "loadbalance":
            return weighted_order(strategy.targets)
        return (self._conditional_target(context, strategy),)

    def _conditional_target(self, context: RequestContext, strategy: Strategy) -> Target:
        chosen = next((condition for condition, globs in self._conditions if _globs_hold(globs, context)), None)
        destination = _conditional_destination(chosen, strategy)
        return self._targets_by_destination.get(destination) or Target(destination=destination)


def _conditional_destination(chosen: Condition | None, strategy: Strategy) -> str:
    if chosen is not None:
        return chosen.target
    if strategy.default is not None:
        return strategy.default
    return strategy.targets[0].destination if strategy.targets else strategy.conditions[0].target


def _attempts_of(route: Route) -> Attempts:
    strategy = route.strategy
    timeout = strategy.timeout_ms / 1000 if strategy.timeout_ms else None
    retry = strategy.retry
    if retry is None or retry.triggers is None:
        return Attempts(1, 0, frozenset(), timeout)
    return Attempts(retry.max_attempts, retry.backoff_ms, frozenset(retry.triggers), timeout)


def weighted_order(targets: list[Target]) -> tuple[Target, ...]:
    """Targets drawn by weight without replacement (weight 0 excluded; no weights means equal)."""
    pool = [(target, 1 if target.weight is None else target.weight) for target in targets]
    pool = [(target, weight) for target, weight in pool if weight > 0]
    ordered = []
    while pool:
        pick = random.uniform(0, sum(weight for _, weight in pool))
        index = 0
        while index < len(pool) - 1 and pick >= pool[index][1]:
            pick -= pool[index][1]
            index += 1
        ordered.append(pool.pop(index)[0])
    return tuple(ordered)


class Router:
    """Finds the route of a request: every clause must hold; the most scope pairs win; ties go to config order."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = [CompiledRoute(route) for route in routes]

    def match(self, context: RequestContext) -> CompiledRoute | None:
        """The winning route, or None."""
        best: CompiledRoute | None = None
        for route in self.routes:
            if route.matches(context) and (best is None or route.specificity > best.specificity):
                best = route
        return best


def shape_params(body: dict, target: Target) -> dict:
    """`default_params`, then `override_params`, then `drop_params` (top-level keys)."""
    if not (target.default_params or target.override_params or target.drop_params):
        return body
    shaped = {**target.default_params, **body, **target.override_params}
    for key in target.drop_params:
        shaped.pop(key, None)
    return shaped
