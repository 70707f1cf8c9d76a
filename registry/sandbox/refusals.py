"""Why the sandbox's egress proxy refuses: the refusal it answers with, and the counter of refusals by reason."""

from __future__ import annotations

from prometheus_client import Counter

REFUSED = Counter("registry_sandbox_egress_refused_total", "Connections the sandbox egress proxy refused", ["reason"])


class Refusal(Exception):
    """Why the proxy will not pass a request on (an HTTP status and a reason the sandbox may read), counted
    under `reason` once raised."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        REFUSED.labels(reason=reason).inc()
