"""The egress proxy's pure parts, fed bytes: redaction (every split of a stream, every encoding and alignment),
inflating bodies, reading what a tunnel's client sends first (a ClientHello's server name, a request line),
the authorities requests claim, the address ranges refusals name, and the refusals' answers."""

from __future__ import annotations

import base64
import gzip
import ipaddress
import json
import ssl
import zlib
from urllib.parse import quote

import pytest

from registry.core.egress import address_rule
from registry.sandbox.hostnames import Endpoint, names_endpoint, parse_authority
from registry.sandbox.openings import MAX_CLIENT_HELLO_BYTES, OpeningKind, OpeningReader
from registry.sandbox.redaction import INFLATED_PIECE_BYTES, Redactor, UnreadableEncoding, inflater_for
from registry.sandbox.refusals import REFUSED_HEADER, Refusal

SECRET = 'sk/live+0123"456789é'
PLACEHOLDER = "regsec_0123456789abcdef0123456789abcdef"
REDACTOR = Redactor({SECRET: PLACEHOLDER, "another-secret-value": "regsec_other"})


def test_every_split_of_a_stream_is_redacted_as_the_whole():
    body = f"<{SECRET}>{SECRET}<another-secret-value>".encode()
    for cut in range(len(body) + 1):
        stream = REDACTOR.stream()
        streamed = stream.feed(body[:cut]) + stream.feed(body[cut:]) + stream.finish()
        assert streamed == f"<{PLACEHOLDER}>{PLACEHOLDER}<regsec_other>".encode(), cut


def test_a_stream_a_byte_at_a_time_holds_back_no_more_than_a_value_could_need():
    stream = REDACTOR.stream()
    passed = b"".join(stream.feed(bytes([byte])) for byte in b"x" * 200)
    assert len(passed) == 200 - REDACTOR.overlap and stream.finish() == b"x" * REDACTOR.overlap


@pytest.mark.parametrize(
    "encoded",
    [
        quote(SECRET, safe=""),
        quote(SECRET, safe="").lower(),
        json.dumps(SECRET)[1:-1],
        json.dumps(SECRET, ensure_ascii=False)[1:-1],
        json.dumps(SECRET)[1:-1].replace("/", "\\/"),
    ],
)
def test_escaped_forms_are_redacted(encoded):
    assert REDACTOR.redact(f"a {encoded} b".encode()) == f"a {PLACEHOLDER} b".encode()


@pytest.mark.parametrize("encode", [base64.standard_b64encode, base64.urlsafe_b64encode])
@pytest.mark.parametrize("before", [b"", b"B", b"Be", b"Bearer "])
def test_base64_at_any_alignment_no_longer_decodes_to_the_secret(encode, before):
    redacted = REDACTOR.redact(encode(before + SECRET.encode() + b" and after"))
    assert PLACEHOLDER.encode() in redacted
    letters = redacted.replace(b"-", b"+").replace(b"_", b"/")
    for start in range(4):  # whatever alignment a decoder picks up
        text = letters[start:]
        assert SECRET.encode() not in base64.b64decode(text[: len(text) - len(text) % 4])


@pytest.mark.parametrize("compress", [gzip.compress, zlib.compress], ids=["gzip", "deflate"])
def test_compressed_bodies_are_inflated_in_bounded_pieces(compress):
    body = b"0123456789" * 200_000
    inflater = inflater_for([b"gzip" if compress is gzip.compress else b"deflate"])
    assert inflater is not None
    compressed = compress(body)
    pieces = [piece for cut in range(0, len(compressed), 1000) for piece in inflater.feed(compressed[cut : cut + 1000])]
    assert b"".join(pieces) + inflater.finish() == body
    assert max(len(piece) for piece in pieces) <= INFLATED_PIECE_BYTES


def test_only_gzip_and_deflate_are_read():
    assert inflater_for([]) is None and inflater_for([b"identity"]) is None
    for codings in ([b"br"], [b"zstd"], [b"gzip", b"gzip"], [b"compress"]):
        with pytest.raises(UnreadableEncoding):
            inflater_for(codings)
    inflater = inflater_for([b"gzip"])
    assert inflater is not None
    with pytest.raises(UnreadableEncoding):
        list(inflater.feed(b"not gzip at all"))


def client_hello(server_name: str | None) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = server_name is not None
    tls = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def read(data: bytes, step: int = 7) -> tuple[OpeningKind, str | None] | None:
    """Feeds `data` a few bytes at a time, as a slow client would."""
    reader = OpeningReader()
    for cut in range(0, len(data), step):
        reader.data += data[cut : cut + step]
        if opening := reader.opening():
            return opening.kind, opening.server_name
    return None


def test_a_client_hello_gives_its_server_name():
    assert read(client_hello("API.example.com")) == (OpeningKind.TLS, "API.example.com")
    assert read(client_hello(None)) == (OpeningKind.TLS, None)
    assert read(client_hello("example.com")[:100]) is None  # not whole yet


def test_what_is_not_a_client_hello():
    assert read(b"\x16\x03\x01\x00\x05hello") == (OpeningKind.UNREADABLE, None)
    assert read(b"\x16\x03\x01\x40\x05" + bytes(MAX_CLIENT_HELLO_BYTES)) == (OpeningKind.UNREADABLE, None)
    assert read(b"\r\nGET / HTTP/1.1\r\n") == (OpeningKind.HTTP, None)  # servers skip an empty line first
    assert read(b"get /  http/1.0\r\n") == (OpeningKind.HTTP, None)
    assert read(b"GET / HTTP/1.1") is None  # the line is not whole yet
    assert read(b"SSH-2.0-OpenSSH_9.2\r\n") == (OpeningKind.OTHER, None)
    assert read(b"\x00\x00\x00\x08\x04\xd2\x16\x2f") == (OpeningKind.OTHER, None)


@pytest.mark.parametrize(
    ("value", "matches"),
    [
        ("localhost:8443", True),
        ("LOCALHOST.:8443", True),
        ("localhost", False),  # the scheme's port, 443
        ("localhost:8443/x", False),
        ("user@localhost:8443", False),
        ("localhost:8443 evil.example", False),
        ("localhost:x", False),
        ("evil.example:8443", False),
    ],
)
def test_an_authority_names_an_endpoint_port_included(value, matches):
    assert names_endpoint(parse_authority(value, 443), Endpoint("localhost", 8443, secure=True)) is matches


@pytest.mark.parametrize(
    ("address", "rule"),
    [
        ("203.0.113.80", "documentation"),
        ("198.51.100.1", "documentation"),
        ("2001:db8::1", "documentation"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("fc00::1", "private"),
        ("169.254.169.254", "link_local"),
        ("100.64.0.1", "shared"),
        ("198.18.0.1", "benchmarking"),
        ("224.0.1.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("8.8.8.8", None),
        ("2001:4860:4860::8888", None),
    ],
)
def test_an_address_is_refused_by_the_rule_that_names_its_range(address, rule):
    found = address_rule(ipaddress.ip_address(address))
    assert (found.name if found else None) == rule


def test_a_refusal_is_one_printable_line_in_its_reason_phrase_header_and_body():
    refusal = Refusal(403, 'evil\r\nx-injected: 1 "quoted" [x] is refused', "test", host="evil\r\nx-injected: 1")
    answer = refusal.answer()
    assert answer.reason == b"Forbidden - sandbox egress refused: evil??x-injected: 1 ?quoted? ?x? is refused"
    assert answer.body == b"refused: evil??x-injected: 1 ?quoted? ?x? is refused\n"
    assert (REFUSED_HEADER, b"rule=test; host=evil??x-injected:?1") in answer.headers()
    posing = Refusal(403, "x", "test", host="a.example; rule=allowed").answer()
    assert (REFUSED_HEADER, b"rule=test; host=a.example??rule?allowed") in posing.headers()
    encoded = answer.encode()
    assert encoded.count(b"\r\n") == 6 and encoded.endswith(b"\r\n\r\n" + answer.body)
    assert len(Refusal(403, "x" * 5000, "test").answer().reason) <= 400


def test_a_refusal_is_redacted_where_the_sandbox_has_secrets():
    refusal = Refusal(403, "another-secret-value.example is not allowed", "test", host="another-secret-value.example")
    redacted = refusal.answer().redacted(REDACTOR.redact)
    parts = (redacted.reason, redacted.body, *dict(redacted.extra).values())
    assert all(b"another-secret-value" not in part and b"regsec_other.example" in part for part in parts)
