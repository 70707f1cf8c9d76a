"""TLS for a listener: a server context (TLS 1.2 or later, no compression, ALPN `http/1.1`) whose certificate
chain and key are re-read when their files change, so new connections get the new certificate."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl

from gatewayproxy.server.tasks import cancel_and_wait

logger = logging.getLogger("gatewayproxy.server")
# How often the certificate files are checked; a changed certificate is served within this long.
RELOAD_POLL_SECONDS = 2.0


def _stamp(path: str) -> tuple[int, int, int]:
    status = os.stat(path)
    return (status.st_mtime_ns, status.st_size, status.st_ino)


class ServerTls:
    """One listener's TLS context and the files it was loaded from."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert = cert
        self.key = key
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
        context.set_alpn_protocols(["http/1.1"])
        self.context = context
        self._stamps = self._read_stamps()
        context.load_cert_chain(cert, key)
        self._task: asyncio.Task[None] | None = None

    def _read_stamps(self) -> tuple[tuple[int, int, int], ...]:
        return (_stamp(self.cert), _stamp(self.key))

    def reload_if_changed(self) -> bool:
        """Load the files again if they changed since the last load; True when the new pair is in use. A pair
        that does not load (say, the certificate written before its key) keeps the old one until it does."""
        try:
            stamps = self._read_stamps()
        except OSError:
            return False
        if stamps == self._stamps:
            return False
        try:
            # Loading into the live context: connections accepted from now on present the new certificate.
            self.context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as error:
            logger.warning("TLS certificate %s not reloaded: %s", self.cert, error)
            return False
        self._stamps = stamps
        logger.info("TLS certificate %s reloaded", self.cert)
        return True

    def start(self) -> None:
        """Watch the files from the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_POLL_SECONDS)
            self.reload_if_changed()

    async def close(self) -> None:
        """Stop watching."""
        await cancel_and_wait(self._task)
        self._task = None
