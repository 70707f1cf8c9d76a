"""The adapter class of each model destination kind, imported on first use so that a gateway without
cloud destinations never loads their SDKs (botocore, google-auth)."""

from __future__ import annotations

import importlib

from gatewayproxy.adapters.base import Adapter

ADAPTER_PATHS: dict[str, str] = {
    "vendor_a": "gatewayproxy.adapters.vendor_a:VendorAAdapter",
    "vendor_a_compatible": "gatewayproxy.adapters.vendor_a_compatible:VendorACompatibleAdapter",
    "cloud_vendor_c": "gatewayproxy.adapters.cloud_vendor_c:CloudVendorCAdapter",
    "vendor_b": "gatewayproxy.adapters.vendor_b:VendorBAdapter",
    "vendor_d": "gatewayproxy.adapters.vendor_d:VendorDAdapter",
    "vendor_e": "gatewayproxy.adapters.vendor_e:VendorEAdapter",
}


def adapter_class(kind: str) -> type[Adapter]:
    """The adapter class of a model destination kind."""
    module, _, name = ADAPTER_PATHS[kind].partition(":")
    adapter: type[Adapter] = getattr(importlib.import_module(module), name)
    return adapter
