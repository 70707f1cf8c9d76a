"""How daphne serves the registry: Twisted does not parse request bodies that the application reads."""

from __future__ import annotations

from types import SimpleNamespace

from daphne.http_protocol import HTTPFactory
from twisted.internet.address import IPv4Address

import settings.asgi  # noqa: F401  (configures daphne as `daphne settings.asgi:application` does)


def test_daphne_requests_leave_form_bodies_to_the_application() -> None:
    connected: list[object] = []
    server = SimpleNamespace(protocol_connected=connected.append)
    address = IPv4Address("TCP", "127.0.0.1", 8000)
    factory = HTTPFactory(server)
    channel = SimpleNamespace(factory=factory, transport=None, getPeer=lambda: address, getHost=lambda: address)

    request = factory.buildProtocol(address).requestFactory(channel)

    assert connected == [request]  # still daphne's request, registered with its server
    assert request._parsePOSTFormSubmission is False
