"""Where bundles come from: a polled file (signed, rollback-protected) or the registry (per session, cached).

Either answers a `Resolution` per request: a bundle to evaluate, a fail-closed refusal, or nothing (missing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from gatewayproxy.config.models import GuardrailSource
from gatewayproxy.plugins.decisions import BackendError, read_token
from gatewayproxy.plugins.worker import SharedWorker
from gatewayproxy.policy.bundle import Bundle, BundleError, allow_all_bundle, load_public_keys, read_bundle
from gatewayproxy.policy.highwater import HighWaterError, HighWaterMark
from gatewayproxy.server.upstream import UpstreamError
from gatewayproxy.vaults.resolvers import Fetch

logger = logging.getLogger("gatewayproxy.policy")
REGISTRY_CACHE_MAX_SESSIONS = 10000


@dataclass(frozen=True)
class Resolution:
    """The bundle for a request; with none, `refusal` says why the source fails closed (else it is missing)."""

    bundle: Bundle | None = None
    refusal: str | None = None


@dataclass(frozen=True)
class Session:
    """The registry session a request belongs to: a verified workspace and the session id."""

    workspace: str
    session: str


class FileSource(SharedWorker):
    """A bundle file reread every `reload_interval_secs`; a bundle older than the high-water mark is refused and
    the last accepted one stays in force. A signed source without a readable mark fails closed."""

    def __init__(self, source: GuardrailSource, on_rejected: Any) -> None:
        super().__init__()
        assert source.path is not None
        self.path = source.path
        self.signed = not source.verification.allow_unsigned
        self.keys = load_public_keys(source.verification)
        self.interval = source.reload_interval_secs
        self.mark = HighWaterMark(source.high_water_path or f"{source.path}.highwater", source.source_id or source.path)
        self.current: Bundle | None = None
        self.failure: str | None = None
        self._on_rejected = on_rejected

    def resolve(self) -> Resolution:
        """The bundle in force (the same for every session)."""
        if self.failure is not None:
            return Resolution(refusal=self.failure)
        return Resolution(bundle=self.current)

    async def open(self) -> None:
        await asyncio.to_thread(self.reload)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await asyncio.to_thread(self.reload)

    def reload(self) -> None:
        """Read the file and the mark; accept the bundle unless it is invalid or older than the mark."""
        try:
            with open(self.path, "rb") as handle:
                raw = handle.read()
            bundle = read_bundle(raw, self.keys, allow_unsigned=not self.signed)
            high = self.mark.read()
        except FileNotFoundError:
            logger.warning("policy bundle file %s is missing; keeping the bundle in force", self.path)
            return
        except (BundleError, HighWaterError, OSError) as error:
            self._refuse("invalid" if isinstance(error, BundleError) else "high_water", str(error))
            return
        if high is None and self.signed:
            self._refuse("high_water", f"no high-water mark at {self.mark.path}: a signed source fails closed")
            return
        if high is not None and bundle.mark < high:
            self._refuse("rollback", f"bundle version {bundle.version} is older than the high-water mark {high[0]}")
            return
        if high is None or bundle.mark > high:
            self.mark.write(bundle.mark)
        self.current, self.failure = bundle, None

    def _refuse(self, reason: str, message: str) -> None:
        """Log and count a refused read; a lost mark, or nothing accepted yet, fails closed."""
        logger.error("policy bundle %s refused (%s): %s", self.path, reason, message)
        self._on_rejected(reason)
        if reason == "high_water" or self.current is None:
            self.failure = message


@dataclass
class CachedBundle:
    """A bundle fetched for a session and when (monotonic seconds)."""

    bundle: Bundle
    fetched_at: float


class RegistrySource:
    """Session bundles fetched lazily from the registry with the bearer token reread each time, cached for
    `cache_ttl_secs`; a failed fetch reuses a stale bundle, else follows `on_backend_error`, and is not retried
    for `retry_after` seconds."""

    def __init__(
        self, source: GuardrailSource, fetch: Fetch, cache: OrderedDict[Session, CachedBundle], retry_after: float
    ) -> None:
        assert source.base_url is not None and source.bearer_token_file is not None
        self.source = source
        self.url = source.base_url.rstrip("/") + source.registry_endpoint
        self.keys = load_public_keys(source.verification)
        self.cache = cache
        self._fetch = fetch
        self._retry_after = retry_after
        self._failed_until: dict[Session, float] = {}
        self._in_flight: dict[Session, asyncio.Future[Resolution]] = {}

    def cached(self, session_id: str) -> CachedBundle | None:
        """The bundle cached for a session id (any workspace), never fetching."""
        return next((entry for key, entry in self.cache.items() if key.session == session_id), None)

    async def resolve(self, session: Session) -> Resolution:
        """The session's bundle: cached while fresh, else fetched once however many requests wait for it."""
        entry = self.cache.get(session)
        if entry is not None and time.monotonic() - entry.fetched_at < self.source.cache_ttl_secs:
            return Resolution(bundle=entry.bundle)
        if time.monotonic() < self._failed_until.get(session, 0.0):
            return self._after_failure(session, "the registry failed recently")
        waiting = self._in_flight.get(session)
        if waiting is not None:
            return await asyncio.shield(waiting)
        future: asyncio.Future[Resolution] = asyncio.get_running_loop().create_future()
        self._in_flight[session] = future
        try:
            resolution = await self._fetch_into_cache(session)
        except Exception as error:
            future.set_exception(error)
            future.exception()  # the waiters, if any, get it; none left is not an unretrieved error
            raise
        finally:
            del self._in_flight[session]
        future.set_result(resolution)
        return resolution

    async def _fetch_into_cache(self, session: Session) -> Resolution:
        try:
            bundle = await self._download(session)
        except (BackendError, BundleError, UpstreamError, OSError, TimeoutError) as error:
            logger.warning("policy bundle fetch for session %s failed: %s", session.session, error)
            self._failed_until[session] = time.monotonic() + self._retry_after
            return self._after_failure(session, str(error))
        self._failed_until.pop(session, None)
        self.cache[session] = CachedBundle(bundle, time.monotonic())
        self.cache.move_to_end(session)
        while len(self.cache) > REGISTRY_CACHE_MAX_SESSIONS:
            self.cache.popitem(last=False)
        return Resolution(bundle=bundle)

    async def _download(self, session: Session) -> Bundle:
        query = {"workspace": session.workspace, "session": session.session}
        accept = "application/jose" if self.keys else "application/json"
        headers = {"authorization": f"Bearer {read_token(self.source.bearer_token_file or '')}", "accept": accept}
        status, body = await self._fetch(f"{self.url}?{urlencode(query)}", headers, self.source.timeout_ms / 1000)
        if status != 200:
            raise BackendError(f"the registry answered HTTP {status}")
        return read_bundle(body, self.keys, allow_unsigned=not self.keys)

    def _after_failure(self, session: Session, why: str) -> Resolution:
        stale = self.cache.get(session)
        if stale is not None:
            return Resolution(bundle=stale.bundle)
        if self.source.on_backend_error == "allow":
            return Resolution(bundle=allow_all_bundle())
        return Resolution(refusal=f"no policy bundle for the session: {why}")
