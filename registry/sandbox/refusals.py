"""Why the sandbox's egress proxy refuses, said everywhere a client or an operator may look: the answer's
status line (its reason phrase, which clients that cannot read a refused CONNECT's body still show: pip's
`Tunnel connection failed: 403 Forbidden - sandbox egress refused: ...`), its body and its
`X-Sandbox-Egress-Refused` header (`rule=...; host=...; address=...`); a counter by reason and a log line
for each refusal (the session, host, port, address and rule; never a URL, a header or a body).

Every refusal's message starts with `refused: ` and holds printable ASCII only, without quotes, backslashes
or brackets, so a build log that quotes it can be searched for it (`packages`).
"""

from __future__ import annotations

import dataclasses
import logging
import string
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from prometheus_client import Counter

from registry.core.observability import session_id

logger = logging.getLogger(__name__)

REFUSED = Counter("registry_sandbox_egress_refused_total", "Connections the sandbox egress proxy refused", ["reason"])
REFUSED_HEADER = b"x-sandbox-egress-refused"
PHRASE_MARK = "sandbox egress"  # between the status's own phrase and the message, in the reason phrase
MAX_MESSAGE_CHARS = 1000
MAX_PHRASE_CHARS = 400
MAX_FIELD_CHARS = 260  # a host name is at most 253
UNSAFE_CHARACTERS = "'\"\\[]"  # kept out of messages, so a quoted one ends where its quotes do
HOST_CHARACTERS = frozenset(string.ascii_letters + string.digits + ".-_:%*")  # names and addresses


@dataclass(frozen=True)
class ProxyAnswer:
    """An answer the proxy writes itself, after which the connection closes."""

    status: int
    reason: bytes
    body: bytes
    extra: tuple[tuple[bytes, bytes], ...] = ()

    @classmethod
    def plain(cls, status: int, message: str) -> ProxyAnswer:
        """An answer with the status's usual phrase and `message` as its body."""
        return cls(status, HTTPStatus(status).phrase.encode(), (message + "\n").encode())

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Its headers, framing included."""
        length = str(len(self.body)).encode()
        return [(b"content-type", b"text/plain"), (b"content-length", length), *self.extra, (b"connection", b"close")]

    def encode(self) -> bytes:
        """The whole answer as bytes, where no HTTP library frames it (before a tunnel is open)."""
        lines = [
            b"HTTP/1.1 %d %s" % (self.status, self.reason),
            *(name + b": " + value for name, value in self.headers()),
        ]
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body

    def redacted(self, redact: Callable[[bytes], bytes]) -> ProxyAnswer:
        """The same answer with `redact` applied to everything it says."""
        extra = tuple((name, redact(value)) for name, value in self.extra)
        return dataclasses.replace(self, reason=redact(self.reason), body=redact(self.body), extra=extra)


class Refusal(Exception):
    """Why the proxy will not pass a request on: an HTTP status and what the sandbox may read (`refused: `
    and `what`), counted under `reason` and logged once raised. `rule` names the rule more finely than the
    counter does (an address range: `documentation`, `loopback`, ...; else the reason)."""

    def __init__(
        self, status: int, what: str, reason: str, *, rule: str = "", host: str = "", address: str = "", port: int = 0
    ) -> None:
        self.status = status
        self.message = printable(f"refused: {what}")[:MAX_MESSAGE_CHARS]
        super().__init__(self.message)
        self.rule = rule or reason
        self.host = host_field(host)
        self.address = address
        refused(reason, rule=self.rule, host=self.host, address=address, port=port)

    def answer(self) -> ProxyAnswer:
        """The 4xx/5xx the HTTP client gets: the message in its reason phrase, body and header."""
        phrase = printable(f"{HTTPStatus(self.status).phrase} - {PHRASE_MARK} {self.message}")[:MAX_PHRASE_CHARS]
        fields = (("rule", self.rule), ("host", self.host), ("address", self.address))
        header = "; ".join(f"{name}={value}" for name, value in fields if value)
        body = (self.message + "\n").encode()
        return ProxyAnswer(self.status, phrase.encode(), body, ((REFUSED_HEADER, header.encode()),))


class RefusalLog:
    """Log lines for refusals, at most `limit` per session in each `window` seconds: a sandbox looping on a
    refused address cannot flood the log (the counter still counts every refusal)."""

    def __init__(self, limit: int = 20, window: float = 60.0) -> None:
        self.limit = limit
        self.window = window
        self.lock = threading.Lock()
        self.windows: dict[str, tuple[float, int]] = {}  # session -> (window start, refusals in it)

    def admit(self, session: str) -> int:
        """The refusal's number in the session's current window (1 for the first); it is logged while that is at
        most `limit`."""
        now = time.monotonic()
        with self.lock:
            for other, (start, _) in list(self.windows.items()):
                if start < now - self.window:
                    del self.windows[other]
            start, seen = self.windows.get(session, (now, 0))
            self.windows[session] = (start, seen + 1)
            return seen + 1


REFUSAL_LOG = RefusalLog()


def refused(reason: str, *, rule: str = "", host: str = "", address: str = "", port: int = 0) -> None:
    """Count a refusal and log it with the session whose proxy refused (the proxy's threads carry its id),
    within `REFUSAL_LOG`'s bound (the last line it allows says so)."""
    REFUSED.labels(reason=reason).inc()
    session = session_id.get() or "-"
    number = REFUSAL_LOG.admit(session)
    if number > REFUSAL_LOG.limit:
        return
    quiet = number == REFUSAL_LOG.limit
    logger.info(
        "sandbox egress refused: session=%s host=%s port=%s address=%s rule=%s%s",
        session,
        host_field(host) or "-",
        port or "-",
        address or "-",
        rule or reason,
        f" (this session's further refusals in the next {REFUSAL_LOG.window:.0f} s are counted, not logged)"
        if quiet
        else "",
    )


def host_field(host: str) -> str:
    """A host as a header field or log line shows it: name and address characters only (each other
    character becomes `?`, so a host cannot pose as another field), bounded."""
    return "".join(character if character in HOST_CHARACTERS else "?" for character in host[:MAX_FIELD_CHARS])


def printable(text: str) -> str:
    """One line of printable ASCII without the characters that would end a quoted message early (each
    other character becomes `?`)."""
    return "".join(
        "?" if not (" " <= character <= "~") or character in UNSAFE_CHARACTERS else character for character in text
    )
