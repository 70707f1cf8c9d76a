"""Secrets at rest: AES-GCM under a key ring from VAULT_ENCRYPTION_KEYS, with key ids for rotation.

`VAULT_ENCRYPTION_KEYS` is `key_id:base64key[,key_id:base64key...]`; the first key encrypts, every
key decrypts. Unset (the embedded default), one key is derived from SECRET_KEY with HKDF.
A sealed value is `<key_id>:<base64(nonce || ciphertext)>`.
"""

from __future__ import annotations

import base64
import functools
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

NONCE_BYTES = 12
DERIVED_KEY_ID = "derived"


class SecretKeyError(Exception):
    """The key ring is malformed, or a sealed value names a key the ring does not hold."""


@functools.cache
def key_ring(configured: str, secret_key: str) -> tuple[str, dict[str, AESGCM]]:
    """(id of the encrypting key, every key by id), parsed once per configuration."""
    if not configured:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"registry-secrets").derive(
            secret_key.encode()
        )
        return DERIVED_KEY_ID, {DERIVED_KEY_ID: AESGCM(derived)}
    keys: dict[str, AESGCM] = {}
    for entry in configured.split(","):
        key_id, _, encoded = entry.strip().partition(":")
        raw = base64.b64decode(encoded)
        if not key_id or len(raw) not in (16, 24, 32):
            raise SecretKeyError("VAULT_ENCRYPTION_KEYS entries must be key_id:base64(16, 24 or 32 bytes)")
        keys[key_id] = AESGCM(raw)
    return next(iter(keys)), keys


def _ring() -> tuple[str, dict[str, AESGCM]]:
    return key_ring(settings.VAULT_ENCRYPTION_KEYS, settings.SECRET_KEY)


def seal(plaintext: str, *, context: str) -> str:
    """Encrypt `plaintext`, bound to `context` (for example the owning row's id) as associated data."""
    key_id, keys = _ring()
    nonce = os.urandom(NONCE_BYTES)
    ciphertext = keys[key_id].encrypt(nonce, plaintext.encode(), context.encode())
    return f"{key_id}:{base64.b64encode(nonce + ciphertext).decode()}"


def unseal(sealed: str, *, context: str) -> str:
    key_id, _, encoded = sealed.partition(":")
    keys = _ring()[1]
    if key_id not in keys:
        raise SecretKeyError(f"no key with id {key_id!r} in the key ring")
    raw = base64.b64decode(encoded)
    return keys[key_id].decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], context.encode()).decode()


def sealed_key_id(sealed: str) -> str:
    return sealed.partition(":")[0]
