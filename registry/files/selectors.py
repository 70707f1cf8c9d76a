"""Reads for files: lookups by id, the content, and the reference check of sessions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any

from django.db.models import QuerySet

from registry.core.errors import invalid_request, not_found
from registry.core.storage import upload_storage
from registry.files.models import File

MAX_LISTED_IDS = 100


def files_with_ids(queryset: QuerySet[File], ids: Iterable[str]) -> list[File]:
    """The files among `ids` (deduplicated, at most 100), newest first; unknown ids are omitted."""
    wanted = set(ids)
    if len(wanted) > MAX_LISTED_IDS:
        raise invalid_request(f"ids: at most {MAX_LISTED_IDS} entries.")
    return list(queryset.filter(pk__in=wanted).order_by("-created_at", "-id"))


def file_content(file: File) -> IO[bytes]:
    """The file's bytes, opened from the storage; an expired file's content is a 404."""
    if file.expired:
        raise not_found(f"File {file.id} has expired.")
    stream: IO[bytes] = upload_storage().open(file.storage_name, "rb")
    return stream


def check_file_resources(*, workspace_id: str, resources: Iterable[dict[str, Any]]) -> None:
    """Every `file` resource of a session names an unexpired file of the session's workspace."""
    for index, resource in enumerate(resources):
        if resource["type"] != "file":
            continue
        file = file_in_workspace(workspace_id=workspace_id, file_id=resource["file_id"])
        if file is None:
            raise invalid_request(f"resources[{index}].file_id: no file {resource['file_id']} in this workspace.")
        if file.expired:
            raise invalid_request(f"resources[{index}].file_id: file {file.id} has expired.")


def file_in_workspace(*, workspace_id: str, file_id: str) -> File | None:
    """The workspace's file with this id (expired or not), or None."""
    return File.objects.filter(workspace_id=workspace_id, pk=file_id).first()
