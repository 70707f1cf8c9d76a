"""The egress rules for client-supplied URLs: public addresses only, unless an operator exception lists them."""

from __future__ import annotations

import ipaddress

import pytest

from registry.core.egress import EgressRefused, EgressRules, check_url, is_public


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fc00::1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ],
)
def test_non_public_addresses_are_not_public(address):
    assert not is_public(ipaddress.ip_address(address))


def test_public_addresses_are_public():
    assert is_public(ipaddress.ip_address("8.8.8.8")) and is_public(ipaddress.ip_address("2001:4860:4860::8888"))


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:5432/", "http://localhost/", "http://169.254.169.254/latest", "http://[::1]/", "ftp://x/"]
)
def test_urls_to_private_places_are_refused(url):
    with pytest.raises(EgressRefused):
        check_url(url, EgressRules())


def test_an_operator_exception_lifts_only_what_it_names():
    assert check_url("http://127.0.0.1:8765/mcp", EgressRules.parse("127.0.0.1:8765")) == [
        ipaddress.ip_address("127.0.0.1")
    ]
    with pytest.raises(EgressRefused):
        check_url("http://127.0.0.1:8766/mcp", EgressRules.parse("127.0.0.1:8765"))
    assert check_url("http://10.0.0.7/", EgressRules.parse("10.0.0.0/8"))
    assert check_url("http://localhost:1/", EgressRules.parse("localhost"))
