"""Streaming stored bytes back to a client, whatever media type the client says it accepts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any

from django.http import FileResponse
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class AnyAcceptNegotiation(DefaultContentNegotiation):
    """Downloads are asked for with `Accept: application/binary`; the view's renderer (JSON, for
    metadata and errors) answers regardless, and the bytes themselves bypass rendering."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, Any]:
        first = next(iter(renderers))
        return first, first.media_type


def attachment(*, stream: IO[bytes], filename: str, content_type: str) -> FileResponse:
    """`stream` as an attachment named `filename`, sent in blocks (and closed once sent)."""
    return FileResponse(stream, as_attachment=True, filename=filename, content_type=content_type)
