"""The signed tape (`trace_exporters` kind `signed_tape`, signer kind `ed25519_local`): an append-only JSONL file
of request summaries, each entry chained to the previous one by SHA-256 and signed with Ed25519.

An entry is the summary plus `seq`, `prev_hash` (the previous entry's `hash`; 64 zeros for the first),
`key_id`, then `hash` = SHA-256 of the canonical JSON of everything else (sorted keys, no spaces) and
`signature` = base64 Ed25519 signature of those same canonical bytes.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key

from gatewayproxy.config.models import FilePath
from gatewayproxy.plugins.decisions import PluginOptions
from gatewayproxy.plugins.worker import SharedWorker, Uninterrupted

logger = logging.getLogger("gatewayproxy.tape")
GENESIS_HASH = "0" * 64
QUEUE_SIZE = 10000
WRITE_BATCH = 512
SEALING_KEYS = ("hash", "signature")


class SignerOptions(PluginOptions):
    """`ed25519_local`: a PEM Ed25519 private key file, and the id written into each entry."""

    private_key_file: FilePath
    key_id: str | None = None


class TapeOptions(PluginOptions):
    """`signed_tape`: the JSONL file, and the signer (a `plugins.signers[]` name; optional with one signer)."""

    path: FilePath
    signer: str | None = None


class Signer:
    """Signs tape entries with an Ed25519 key read once at build time."""

    def __init__(self, name: str, options: SignerOptions) -> None:
        with open(options.private_key_file, "rb") as handle:
            key = load_pem_private_key(handle.read(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("private_key_file: not an Ed25519 private key")
        self.key = key
        self.key_id = options.key_id or name

    def sign(self, data: bytes) -> str:
        """The base64 signature of `data`."""
        return base64.b64encode(self.key.sign(data)).decode()


def canonical(entry: dict[str, Any]) -> bytes:
    """The bytes an entry's hash and signature cover: every field but `hash` and `signature`, canonical JSON."""
    body = {key: value for key, value in entry.items() if key not in SEALING_KEYS}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sealed(summary: dict[str, Any], seq: int, prev_hash: str, signer: Signer) -> dict[str, Any]:
    """The tape entry of a request summary at position `seq` after `prev_hash`."""
    entry = {**summary, "seq": seq, "prev_hash": prev_hash, "key_id": signer.key_id}
    data = canonical(entry)
    return {**entry, "hash": hashlib.sha256(data).hexdigest(), "signature": signer.sign(data)}


def _last_line(path: str) -> bytes | None:
    """The last non-empty line of a file (read from its end), or None for a missing or empty file."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            position, tail = handle.tell(), b""
            while position > 0 and tail.count(b"\n") < 2:
                step = min(4096, position)
                position -= step
                handle.seek(position)
                tail = handle.read(step) + tail
    except FileNotFoundError:
        return None
    lines = [line for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else None


class TapeWriter(SharedWorker):
    """The one writer of a tape file: requests queue their summaries, a task appends them (off the request
    path), continuing the chain of what the file already holds."""

    def __init__(self, path: str, signer: Signer) -> None:
        super().__init__()
        self.path = path
        self.signer = signer
        self.dropped = 0
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._seq = 0
        self._prev_hash = GENESIS_HASH
        self._appending = Uninterrupted()

    def offer(self, summary: dict[str, Any]) -> None:
        """Queue a summary; a full queue drops it (logged)."""
        try:
            self._queue.put_nowait(summary)
        except asyncio.QueueFull:
            self.dropped += 1
            logger.error("signed tape queue is full; dropped the summary of request %s", summary.get("request_id"))

    async def open(self) -> None:
        last = await asyncio.to_thread(_last_line, self.path)
        if last is None:
            return
        try:
            entry = json.loads(last)
            self._seq, self._prev_hash = int(entry["seq"]), str(entry["hash"])
        except (ValueError, TypeError, KeyError):
            raise RuntimeError(f"cannot continue the signed tape {self.path}: its last line is not an entry") from None

    async def run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < WRITE_BATCH:
                batch.append(self._queue.get_nowait())
            await self._appending.run(self._append(batch))

    async def drain(self) -> None:
        await self._appending.finish()
        batch = []
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        if batch:
            await self._append(batch)

    async def _append(self, summaries: list[dict[str, Any]]) -> None:
        lines = []
        for summary in summaries:
            self._seq += 1
            entry = sealed(summary, self._seq, self._prev_hash, self.signer)
            self._prev_hash = entry["hash"]
            lines.append(json.dumps(entry, ensure_ascii=False) + "\n")
        try:
            await asyncio.to_thread(self._write, "".join(lines))
        except OSError as error:
            logger.error("cannot append to the signed tape %s: %s", self.path, error)

    def _write(self, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())


@dataclass(frozen=True)
class TapeProblem:
    """The first line of a tape that does not verify, and why."""

    line: int
    reason: str


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """An Ed25519 public key from PEM."""
    key = load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


def _entry_problem(entry: Any, expected_seq: int, prev_hash: str, key: Ed25519PublicKey) -> str | None:
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("prev_hash") != prev_hash:
        return "prev_hash does not match the previous entry (a line was removed, inserted or reordered)"
    if entry.get("seq") != expected_seq:
        return f"seq is {entry.get('seq')!r}, expected {expected_seq}"
    data = canonical(entry)
    if entry.get("hash") != hashlib.sha256(data).hexdigest():
        return "the hash does not match the entry (it was altered)"
    try:
        key.verify(base64.b64decode(str(entry.get("signature", ""))), data)
    except (InvalidSignature, ValueError):
        return "the signature does not verify"
    return None


def verify_tape(lines: list[str], key: Ed25519PublicKey) -> TapeProblem | None:
    """Check the chain and every signature; the first bad line (1-based, blank lines skipped), or None when the
    tape is intact."""
    prev_hash, seq = GENESIS_HASH, 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            return TapeProblem(number, "not valid JSON")
        seq += 1
        problem = _entry_problem(entry, seq, prev_hash, key)
        if problem is not None:
            return TapeProblem(number, problem)
        prev_hash = entry["hash"]
    return None
