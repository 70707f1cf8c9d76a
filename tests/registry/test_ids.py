"""Public ids: prefix, length, alphabet, and characters spread evenly (the rejection sampling)."""

from __future__ import annotations

import re
from collections import Counter

from registry.core.ids import ALPHABET, RANDOM_LENGTH, new_id


def test_an_id_is_the_prefix_and_twenty_four_alphabet_characters() -> None:
    identifier = new_id("sevt")

    assert re.fullmatch(r"sevt_[A-Za-z0-9]{24}", identifier)


def test_ids_do_not_repeat() -> None:
    identifiers = {new_id("req") for _ in range(10_000)}

    assert len(identifiers) == 10_000


def test_every_character_is_about_equally_likely() -> None:
    counts = Counter("".join(new_id("x")[2:] for _ in range(6_000)))

    expected = 6_000 * RANDOM_LENGTH / len(ALPHABET)  # about 2,323 per character
    assert set(counts) == set(ALPHABET)
    # Mapping every byte modulo 62 would give the first eight characters five byte values of 256 and
    # the rest four (25 % more often); the sampling noise is about 2 % per character, so a bound of
    # 10 % (5 sigma) catches that bias without flaking.
    assert all(abs(count - expected) < expected * 0.10 for count in counts.values())
