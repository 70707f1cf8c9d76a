"""The sender's request and its refusals before any connection, without a database: the bytes it writes verify with
the reference client, and an attempt that cannot be made says why."""

from __future__ import annotations

import asyncio
import time

import anthropic
import pytest

from registry.core.egress import EgressRules
from registry.webhooks.sender import Destination, Message, Sender, SendResult, request_bytes
from registry.webhooks.signing import new_signing_secret

BODY = (
    b'{"type":"event","id":"wevt_1","created_at":"2026-01-01T00:00:00Z","data":{"type":"session.created",'
    b'"id":"sesn_1","workspace_id":"wsp_1","organization_id":"org_1"}}'
)


def send(message: Message, allow: str = "") -> SendResult:
    sender = Sender(timeout=2, rules=lambda: EgressRules.parse(allow))
    try:
        return asyncio.run(sender.send(message))
    finally:
        sender.close()


def test_the_request_is_signed_as_the_reference_client_verifies_it():
    secret = new_signing_secret()
    destination = Destination.parse("https://hooks.example.com:8443/in/coming?tenant=a%20b")
    raw = request_bytes(Message("unused", "wevt_1", BODY, secret, owner="whep_1"), destination, time.time())
    head, _, body = raw.partition(b"\r\n\r\n")
    request_line, *lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    assert request_line == "POST /in/coming?tenant=a%20b HTTP/1.1"
    assert headers["host"] == "hooks.example.com:8443" and headers["content-length"] == str(len(BODY))
    assert body == BODY
    client = anthropic.Anthropic(api_key="unused")
    try:
        event = client.beta.webhooks.unwrap(body.decode(), headers=headers, key=secret)
    finally:
        client.close()
    assert (event.id, event.data.type) == ("wevt_1", "session.created")


@pytest.mark.parametrize(
    ("url", "allow", "outcome", "error"),
    [
        ("ftp://example.com/x", "", "invalid_url", "invalid URL: only http and https URLs with a host are sent to"),
        ("http://10.1.2.3/x", "", "egress_refused", "egress refused: 10.1.2.3 is in a private range"),
        ("http://169.254.169.254/x", "", "egress_refused", "egress refused: 169.254.169.254 is a link-local address"),
        ("http://localhost:9/x", "", "egress_refused", "egress refused: localhost resolves to 127.0.0.1, which is"),
        ("http://nowhere.invalid/x", "", "egress_refused", "egress refused: nowhere.invalid could not be resolved."),
    ],
)
def test_an_attempt_refused_before_connecting_says_why(url, allow, outcome, error):
    result = send(Message(url, "wevt_1", BODY, new_signing_secret(), owner="whep_1"), allow)
    assert (result.outcome, result.status, result.succeeded) == (outcome, None, False)
    assert result.error.startswith(error)


def test_an_endpoint_without_a_readable_secret_is_not_sent_to():
    result = send(Message("http://127.0.0.1:9/x", "wevt_1", BODY, "", owner="whep_1"), "127.0.0.1")
    assert (result.outcome, result.error) == ("no_secret", "the endpoint's signing secret could not be read")


def test_a_refused_connection_is_named():
    result = send(Message("http://127.0.0.1:9/x", "wevt_1", BODY, new_signing_secret(), owner="whep_1"), "127.0.0.1")
    assert (result.outcome, result.error) == ("connection", "connection refused")
