"""Where a sender connects: the endpoint's name is resolved and every address checked at each delivery, and the
request goes to the checked address, so a name that moved to a private address is refused before any connection.
DNS is changed for real: a unique name in /etc/hosts (glibc reads it at each lookup), restored afterwards."""

from __future__ import annotations

import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.pki import make_pki
from fakes.waiting import wait_until
from registry.core.egress import EgressRefused, EgressRules, check_url
from registry.webhooks.models import WebhookAttempt
from registry.webhooks.signing import new_signing_secret
from tests.webhooks.conftest import emit, make_endpoint, status_of

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HOSTS = Path("/etc/hosts")
ALLOWED = "127.0.0.2/32"


@pytest.fixture
def point_name() -> Iterator[Callable[[str], str]]:
    """Point a fresh name at an address in /etc/hosts (again to move it); the name is removed at the end."""
    name = f"hook-{secrets.token_hex(4)}.test"

    def rewrite(address: str | None) -> None:
        kept = [line for line in HOSTS.read_text().splitlines() if not line.endswith(f" {name}")]
        entry = [f"{address} {name}"] if address else []
        with HOSTS.open("r+") as hosts:  # in place: /etc/hosts may be a mount
            hosts.write("\n".join([*kept, *entry]) + "\n")
            hosts.truncate()

    def point(address: str) -> str:
        rewrite(address)
        wait_until(lambda: socket.gethostbyname(name) == address, timeout=5, what=f"{name} to resolve to {address}")
        return name

    yield point
    rewrite(None)


def test_a_name_moved_to_a_private_address_is_refused_at_delivery_without_a_connection(
    workspace, receivers, start_sender, point_name
):
    secret = new_signing_secret()
    allowed = receivers(secret, host="127.0.0.2")
    trap = receivers(secret, host="127.0.0.3", port=allowed.port)  # same port, the address that is not allowed
    name = point_name("127.0.0.2")
    url = f"http://{name}:{allowed.port}/hook"
    rules = EgressRules.parse(ALLOWED)
    assert check_url(url, rules)  # what the API checks when the endpoint is created: allowed
    endpoint = make_endpoint(workspace, url, secret=secret)
    start_sender(REGISTRY_EGRESS_ALLOW=ALLOWED)
    [first] = emit(workspace)
    wait_until(lambda: status_of(endpoint, first) == "succeeded", what="the first event, at 127.0.0.2")
    assert allowed.ids() == [first] and allowed.arrivals[0].headers["host"] == f"{name}:{allowed.port}"

    point_name("127.0.0.3")
    with pytest.raises(EgressRefused):
        check_url(url, rules)
    [second] = emit(workspace)
    attempt = wait_until(
        lambda: WebhookAttempt.objects.filter(delivery__event__id=second).first(), what="the second event's try"
    )
    assert attempt.error == f"egress refused: {name} resolves to 127.0.0.3, which is a loopback address"
    assert (attempt.succeeded, attempt.response_status) == (False, None)
    time.sleep(0.5)
    assert (trap.connections, trap.arrivals) == (0, [])  # no request, not even a connection
    assert allowed.ids() == [first]


def test_an_address_outside_the_exceptions_is_refused_as_such(workspace, hook, start_sender):
    receiver, endpoint = hook(host="127.0.0.4")
    start_sender()
    emit(workspace)
    attempt = wait_until(lambda: WebhookAttempt.objects.filter(delivery__endpoint=endpoint).first(), what="a try")
    assert attempt.error == "egress refused: 127.0.0.4 is a loopback address"
    assert receiver.connections == 0


def test_https_goes_to_the_checked_address_and_verifies_the_endpoints_name(
    workspace, receivers, start_sender, point_name, tmp_path
):
    pki = make_pki(tmp_path)  # a CA and a server certificate for localhost and 127.0.0.1
    secret = new_signing_secret()
    trusted = receivers(secret, chain=pki.server_chain)
    rogue = receivers(secret, chain=pki.rogue_chain)
    other_name = point_name("127.0.0.1")  # the same address under a name the certificate does not carry
    good = make_endpoint(workspace, f"https://localhost:{trusted.port}/hook", secret=secret)
    wrong_name = make_endpoint(workspace, f"https://{other_name}:{trusted.port}/hook", secret=secret)
    untrusted = make_endpoint(workspace, f"https://localhost:{rogue.port}/hook", secret=secret)
    start_sender(SSL_CERT_FILE=str(pki.ca_file))
    [event_id] = emit(workspace)

    wait_until(lambda: status_of(good, event_id) == "succeeded", what="the delivery over TLS")
    assert trusted.arrivals[0].headers["host"] == f"localhost:{trusted.port}"
    for endpoint, says in ((wrong_name, "Hostname mismatch"), (untrusted, "self-signed certificate")):
        attempts = WebhookAttempt.objects.filter(delivery__endpoint=endpoint)
        attempt = wait_until(attempts.first, what=f"a try to {endpoint.url}")
        assert attempt.error.startswith("TLS: ") and says in attempt.error, attempt.error
    assert trusted.ids() == [event_id] and rogue.arrivals == []
