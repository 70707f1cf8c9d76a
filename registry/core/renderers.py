"""JSON rendering with orjson: the registry's responses are plain dicts, lists and strings."""

from __future__ import annotations

from typing import Any

import orjson
from rest_framework.renderers import JSONRenderer


class FastJSONRenderer(JSONRenderer):
    """DRF's JSON renderer, encoding with orjson (several times faster on large lists)."""

    def render(self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, default=str)
