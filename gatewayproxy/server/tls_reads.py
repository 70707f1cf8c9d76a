"""Reading TLS connections without a fresh 256 KiB buffer per read.

Given a plain protocol, uvloop's TLS layer asks OpenSSL for up to 256 KiB per read into a new bytes object,
above glibc's mmap threshold: every read cost an mmap, an mremap and a munmap (counted with strace). A
buffered protocol is read into instead. The bytes are copied out before the next read, so one buffer serves
every TLS connection of the process's (single-threaded) loop, client-facing and upstream alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

TLS_READ_BYTES = 65536  # decrypted bytes handed over per read (more wait for the next)


class SharedTlsReads(asyncio.BufferedProtocol):
    """Mixin for a protocol whose `data_received` takes the bytes (list it after that protocol's class)."""

    _shared = memoryview(bytearray(TLS_READ_BYTES))
    data_received: Callable[[bytes], None]

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._shared

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(bytes(self._shared[:nbytes]))
