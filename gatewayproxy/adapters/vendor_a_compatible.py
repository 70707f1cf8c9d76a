"""The `vendor_a_compatible` adapter: any server speaking vendor A's chat-completions and embeddings API."""

from __future__ import annotations

from typing import ClassVar

from gatewayproxy.adapters.vendor_a import VendorAAdapter
from gatewayproxy.context import Operation


class VendorACompatibleAdapter(VendorAAdapter):
    """Like vendor A without the responses API; the default base URL is a local inference server."""

    operations: ClassVar[frozenset[Operation]] = frozenset({Operation.CHAT, Operation.EMBEDDINGS})
    default_base_url = "http://localhost:8000/v1"
