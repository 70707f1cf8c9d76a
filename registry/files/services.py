"""Writes for files: upload (bytes to the storage, metadata to the database) and delete."""

from __future__ import annotations

import mimetypes
from datetime import timedelta

from django.db import transaction

from registry.core.storage import StagedWrites, delete_after_commit
from registry.core.uploads import UploadedPart, final_component
from registry.files.models import File
from registry.workspaces.models import Workspace

DEFAULT_MIME_TYPE = "application/octet-stream"


def mime_type_of(part: UploadedPart) -> str:
    """The part's declared content type, else one guessed from its name."""
    declared = (part.content_type or "").strip()
    return declared or mimetypes.guess_type(part.client_path)[0] or DEFAULT_MIME_TYPE


def filename_of(part: UploadedPart, mime_type: str) -> str:
    """The final path component of the client's name; `unnamed` (plus an extension) when there is none."""
    return final_component(part.client_path) or "unnamed" + (mimetypes.guess_extension(mime_type) or "")


@transaction.atomic
def file_upload(*, workspace: Workspace, part: UploadedPart, expires_in_seconds: int | None) -> File:
    """Store the part's bytes and its metadata; `expires_at` is the upload time plus `expires_in_seconds`."""
    mime_type = mime_type_of(part)
    file = File(
        workspace=workspace, filename=filename_of(part, mime_type), mime_type=mime_type, size_bytes=part.size or 0
    )
    with StagedWrites() as staged:
        file.storage_name = staged.save(f"files/{workspace.pk}/{file.id}", part)
        file.save(force_insert=True)
        if expires_in_seconds is not None:
            file.expires_at = file.created_at + timedelta(seconds=expires_in_seconds)
            file.save(update_fields=["expires_at"])
    return file


@transaction.atomic
def file_delete(*, file: File) -> None:
    """Drop the row; the bytes go once the deletion commits."""
    File.objects.filter(pk=file.pk).delete()
    delete_after_commit([file.storage_name])
