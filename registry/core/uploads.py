"""Multipart uploads read under REGISTRY_MAX_UPLOAD_BYTES, keeping each part's client-side path.

A declared Content-Length over the limit is refused by `BodySizeLimitMiddleware`; here the running
count of received bytes enforces the same limit for bodies of unknown length (chunked) and for bodies
longer than they declared. Either way the answer is 413 before anything reaches the storage.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import TooManyFieldsSent, TooManyFilesSent
from django.core.files.uploadedfile import TemporaryUploadedFile
from django.core.files.uploadhandler import FileUploadHandler, TemporaryFileUploadHandler
from django.http import HttpRequest, QueryDict
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.utils.datastructures import MultiValueDict
from rest_framework.request import Request

from registry.core.errors import ApiError, ErrorType, invalid_request

READ_CHUNK_BYTES = 64 * 1024


def upload_limit() -> int:
    return int(settings.REGISTRY_MAX_UPLOAD_BYTES)


def too_large(limit: int) -> ApiError:
    return ApiError(ErrorType.REQUEST_TOO_LARGE, f"Request body exceeds the limit of {limit} bytes.")


class UploadedPart(TemporaryUploadedFile):
    """An uploaded file part that remembers the full path the client named it with.

    Django keeps only the last path component in `name`; skill bundles need the directories.
    """

    def __init__(self, client_path: str, **kwargs: Any) -> None:
        super().__init__(name=final_component(client_path) or "unnamed", **kwargs)
        self.client_path = client_path


class BoundedUploadHandler(TemporaryFileUploadHandler):
    """Spools each file part to a temporary file, and stops the upload once the parts pass the limit."""

    def __init__(self, request: HttpRequest, limit: int) -> None:
        super().__init__(request)
        self.limit = limit
        self.received = 0

    def new_file(self, field_name: str, file_name: str, content_type: str, *args: Any, **kwargs: Any) -> None:
        # The base bookkeeping only: the parent would open a plain TemporaryUploadedFile instead.
        FileUploadHandler.new_file(self, field_name, file_name, content_type, *args, **kwargs)
        self.file = UploadedPart(
            file_name,
            content_type=self.content_type,
            size=0,
            charset=self.charset,
            content_type_extra=self.content_type_extra,
        )

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        self.received += len(raw_data)
        if self.received > self.limit:
            raise too_large(self.limit)
        super().receive_data_chunk(raw_data, start)


class PathKeepingParser(MultiPartParser):
    """Django's multipart parser, except that a part's filename keeps its directories."""

    def sanitize_file_name(self, file_name: str) -> str | None:
        kept = "".join(character for character in file_name.replace("\\", "/") if character.isprintable())
        return kept or None


def final_component(path: str) -> str:
    """The last path component of a client-side name; "" when it has none ("dir/", "..")."""
    last = path.replace("\\", "/").rsplit("/", 1)[-1]
    return "" if last in (".", "..") else last


def _spool_unknown_length(request: HttpRequest, spool: IO[bytes], limit: int) -> int:
    """Copy a body of unknown length into `spool`, refusing it as soon as it passes the limit."""
    size = 0
    while chunk := request.read(READ_CHUNK_BYTES):
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        spool.write(chunk)
    spool.seek(0)
    return size


def _parse(request: HttpRequest, meta: dict[str, Any], stream: Any, limit: int) -> tuple[QueryDict, MultiValueDict]:  # type: ignore[type-arg]
    try:
        parser = PathKeepingParser(meta, stream, [BoundedUploadHandler(request, limit)], request.encoding)
        return parser.parse()  # type: ignore[no-any-return]
    except MultiPartParserError as error:
        raise invalid_request(f"Malformed multipart body: {error}") from error
    except (TooManyFieldsSent, TooManyFilesSent) as error:
        raise invalid_request(f"Too many parts in the multipart body: {error}") from error


def file_parts(parts: MultiValueDict, *names: str) -> list[UploadedPart]:  # type: ignore[type-arg]
    """Every file part sent under one of `names`; a file part under any other name is refused."""
    others = sorted(set(parts) - set(names))
    if others:
        raise invalid_request(f"{others[0]}: unknown file part.")
    return [part for name in names for part in parts.getlist(name)]


def _read_multipart(request: Request) -> tuple[QueryDict, MultiValueDict]:  # type: ignore[type-arg]
    django_request = request._request
    if django_request.content_type != "multipart/form-data":
        raise invalid_request("Content-Type: must be multipart/form-data.")
    limit = upload_limit()
    meta = dict(django_request.META)
    if meta.get("CONTENT_LENGTH"):
        return _parse(django_request, meta, django_request, limit)
    with tempfile.SpooledTemporaryFile(max_size=settings.FILE_UPLOAD_MAX_MEMORY_SIZE) as spool:
        size = _spool_unknown_length(django_request, spool, limit)  # type: ignore[arg-type]
        return _parse(django_request, {**meta, "CONTENT_LENGTH": str(size)}, spool, limit)


@contextmanager
def read_multipart(request: Request) -> Iterator[tuple[QueryDict, MultiValueDict]]:  # type: ignore[type-arg]
    """The form fields and file parts (as `UploadedPart`) of a multipart request, within the limit.

    The parts' temporary files are closed when the block ends (the storage may have moved them).
    """
    fields, parts = _read_multipart(request)
    try:
        yield fields, parts
    finally:
        for _, uploaded in parts.lists():
            for part in uploaded:
                part.close()
