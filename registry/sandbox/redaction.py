"""Taking a sandbox's secrets back out of what comes in: every secret value (and its common encodings) in a
response the egress proxy reads becomes the secret's placeholder, streamed with an overlap tail so a value
split across chunks is caught; gzip and deflate bodies are inflated first, piece by bounded piece."""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Iterator, Mapping
from urllib.parse import quote, quote_plus

MIN_ENCODED_BYTES = 8  # shorter encoded fragments would match by chance in ordinary content
INFLATED_PIECE_BYTES = 256 * 1024  # at most this much inflated output is held at once
ZLIB_CODINGS = {b"gzip", b"x-gzip", b"deflate"}


class Redactor:
    """Replaces each secret value, and its encodings, by the secret's placeholder."""

    def __init__(self, placeholders: Mapping[str, str]) -> None:
        """`placeholders`: secret value -> placeholder."""
        self.replacements: dict[bytes, bytes] = {}
        for value, placeholder in placeholders.items():
            for form in encoded_forms(value):
                self.replacements.setdefault(form, placeholder.encode())
        longest_first = sorted(self.replacements, key=len, reverse=True)
        self.pattern = re.compile(b"|".join(re.escape(form) for form in longest_first))
        self.overlap = len(longest_first[0]) - 1 if longest_first else 0

    def redact(self, data: bytes) -> bytes:
        return self.pattern.sub(self._replacement, data) if self.found_in(data) else data

    def found_in(self, data: bytes) -> bool:
        """Any value or encoding in `data`: a plain substring search, much faster than the regex scan."""
        return any(form in data for form in self.replacements)

    def stream(self) -> RedactingStream:
        return RedactingStream(self)

    def _replacement(self, match: re.Match[bytes]) -> bytes:
        return self.replacements[match.group()]


class RedactingStream:
    """One body redacted as it streams: the last `overlap` bytes wait for the next chunk, since a value
    may continue there; `finish` redacts and returns what waited."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.pending = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self.pending + data
        decided = len(buffer) - self.redactor.overlap  # a match starting before this is complete in `buffer`
        pieces: list[bytes] = []
        position = 0
        for match in self.redactor.pattern.finditer(buffer) if self.redactor.found_in(buffer) else ():
            if match.start() >= decided:
                break
            pieces += [buffer[position : match.start()], self.redactor.replacements[match.group()]]
            position = match.end()
        cut = max(position, decided)
        pieces.append(buffer[position:cut])
        self.pending = buffer[cut:]
        return b"".join(pieces)

    def finish(self) -> bytes:
        rest, self.pending = self.pending, b""
        return self.redactor.redact(rest)


def encoded_forms(value: str) -> set[bytes]:
    """The value as sent, percent-encoded, JSON-escaped and base64-encoded (standard and url-safe, at each
    of the three byte alignments it can have inside a longer encoded text)."""
    raw = value.encode()
    escaped = {
        quote(value, safe=""),
        quote_plus(value, safe=""),
        _lower_hex_escapes(quote(value, safe="")),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        json.dumps(value)[1:-1].replace("/", "\\/"),
    }
    encoded = {form.encode() for form in escaped} | set(_base64_fragments(raw))
    return {raw} | {form for form in encoded if len(form) >= MIN_ENCODED_BYTES}


def _lower_hex_escapes(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda match: match.group().lower(), text)


def _base64_fragments(raw: bytes) -> Iterator[bytes]:
    """The base64 characters that depend on `raw` alone, when it starts `offset` bytes into a 3-byte group."""
    for offset in range(3):
        first = -(-8 * offset // 6)  # the first character with no bits of the bytes before
        last = 8 * (offset + len(raw)) // 6  # the characters after take bits of the bytes after
        for encode in (base64.standard_b64encode, base64.urlsafe_b64encode):
            yield encode(bytes(offset) + raw)[first:last]


class UnreadableEncoding(Exception):
    """A content coding the proxy cannot decode, so it cannot look for secrets in the body."""


class Inflater:
    """A gzip or zlib (`deflate`) body inflated as it streams, in pieces of bounded size."""

    def __init__(self) -> None:
        self.inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # either header

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            try:
                piece = self.inflater.decompress(data, INFLATED_PIECE_BYTES)
            except zlib.error as error:
                raise UnreadableEncoding("the body is not valid gzip or deflate data") from error
            if piece:
                yield piece
            data = self.inflater.unconsumed_tail

    def finish(self) -> bytes:
        return self.inflater.flush()


def inflater_for(content_codings: list[bytes]) -> Inflater | None:
    """The decoder of a body with these `Content-Encoding` values (None: identity); UnreadableEncoding for
    anything but one gzip or deflate coding."""
    codings = [coding for coding in content_codings if coding != b"identity"]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in ZLIB_CODINGS:
        raise UnreadableEncoding(f"content-encoding {b', '.join(codings).decode('latin-1')}")
    return Inflater()
