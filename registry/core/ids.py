"""Public identifiers: `<prefix>_<24 base62 characters from a CSPRNG>`, and their path patterns."""

from __future__ import annotations

import secrets
import string

from django.db import models
from django.urls import register_converter
from django.utils.deconstruct import deconstructible

ALPHABET = string.ascii_letters + string.digits
RANDOM_LENGTH = 24

# Every public prefix of decisions.md; a path id must match `^<prefix>_[A-Za-z0-9_-]+$`.
PREFIXES = (
    "agent",
    "sesn",
    "sesrsc",
    "sevt",
    "sthr",
    "env",
    "file",
    "mems",
    "mem",
    "memver",
    "skill",
    "vlt",
    "vcrd",
    "gitcred",
    "trg",
    "wsp",
    "req",
    "work",
    "envkey",
)


# A random byte below this maps to an alphabet character with equal odds (it is a multiple of 62);
# bytes at or above it are dropped, so one draw of DRAW_BYTES almost always yields RANDOM_LENGTH.
UNBIASED_BYTE_LIMIT = len(ALPHABET) * (256 // len(ALPHABET))
DRAW_BYTES = 32


def new_id(prefix: str) -> str:
    """Return a fresh unguessable id with the given prefix.

    One CSPRNG read per id (`secrets.choice` per character made one `getrandom` call each, a third
    of an append's CPU time), rejection-sampled so every character is uniform over the alphabet.
    """
    characters: list[str] = []
    while len(characters) < RANDOM_LENGTH:
        characters.extend(
            ALPHABET[byte % len(ALPHABET)] for byte in secrets.token_bytes(DRAW_BYTES) if byte < UNBIASED_BYTE_LIMIT
        )
    return f"{prefix}_" + "".join(characters[:RANDOM_LENGTH])


@deconstructible
class IdFactory:
    """Callable default producing ids of one prefix (deconstructible, so migrations can name it)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(self) -> str:
        return new_id(self.prefix)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdFactory) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)


def public_id_field(prefix: str) -> models.CharField:
    """Primary key holding a prefixed public id, generated on insert."""
    return models.CharField(primary_key=True, max_length=64, editable=False, default=IdFactory(prefix))


class _PrefixedIdConverter:
    """URL converter: a path segment matches only ids of its own prefix, anything else is a 404."""

    regex = ""

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


def register_id_converters() -> None:
    """Register one converter per prefix, named `<prefix>_id` (for example `<agent_id:agent_id>`)."""
    for prefix in PREFIXES:
        converter = type(f"{prefix.title()}IdConverter", (_PrefixedIdConverter,), {"regex": f"{prefix}_[A-Za-z0-9_-]+"})
        register_converter(converter, f"{prefix}_id")
