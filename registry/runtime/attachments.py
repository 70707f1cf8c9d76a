"""Workspace files the model reads: image and document blocks that name a `file_id`, and file rubrics.

The model is sent the file's content, never the registry's id: an image as base64 with its media
type, a PDF document as base64, any other document as its UTF-8 text. A file that is gone (deleted,
expired, of another workspace) or that the model cannot read becomes a short text block saying so.
Contents are read once per runner and kept by id (files are immutable).
"""

from __future__ import annotations

import base64
from typing import Any

from registry.files.models import File
from registry.files.selectors import file_content, file_in_workspace

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
MAX_ATTACHMENT_BYTES = 32 * 1024 * 1024
RUBRIC_FILE_MAX_BYTES = 200_000


def file_text(workspace_id: str, file_id: str, limit: int) -> str | None:
    """The first `limit` bytes of a file of the workspace as text, or None when it is gone."""
    file = file_in_workspace(workspace_id=workspace_id, file_id=file_id)
    if file is None or file.expired:
        return None
    with file_content(file) as stream:
        return stream.read(limit).decode("utf-8", "replace")


def rubric_for_grader(workspace_id: str, rubric: dict[str, Any]) -> dict[str, Any]:
    """A file rubric as the text the grader reads (the file of the session's workspace, as UTF-8)."""
    if rubric["type"] != "file":
        return rubric
    text = file_text(workspace_id, rubric["file_id"], RUBRIC_FILE_MAX_BYTES)
    if text is None:
        return {"type": "text", "content": f"(the rubric file {rubric['file_id']} no longer exists)"}
    return {"type": "text", "content": text}


class FileSources:
    """Replaces `{"type": "file", "file_id": ...}` sources in messages with the files' contents."""

    def __init__(self, workspace_id: str) -> None:
        self.workspace_id = workspace_id
        self.cache: dict[str, tuple[File, bytes] | None] = {}

    def resolve(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not any(_names_a_file(block) for message in messages for block in _blocks(message["content"])):
            return messages
        return [{**message, "content": [self._block(block) for block in message["content"]]} for message in messages]

    def _block(self, block: dict[str, Any]) -> dict[str, Any]:
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            return {**block, "content": [self._block(inner) for inner in block["content"]]}
        if not _names_a_file(block):
            return block
        file_id = block["source"]["file_id"]
        loaded = self._load(file_id)
        if loaded is None:
            return {"type": "text", "text": f"[file {file_id} is not available: it was deleted or has expired]"}
        file, data = loaded
        extra = {key: value for key, value in block.items() if key not in ("type", "source")}
        if block["type"] == "image":
            if file.mime_type not in IMAGE_TYPES:
                return {"type": "text", "text": f"[file {file_id} ({file.mime_type}) is not an image the model reads]"}
            source = {"type": "base64", "media_type": file.mime_type, "data": base64.b64encode(data).decode()}
        elif file.mime_type == "application/pdf":
            source = {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(data).decode()}
        else:
            source = {"type": "text", "media_type": "text/plain", "data": data.decode("utf-8", "replace")}
            extra.setdefault("title", file.filename)
        return {"type": block["type"], "source": source, **extra}

    def _load(self, file_id: str) -> tuple[File, bytes] | None:
        if file_id not in self.cache:
            file = file_in_workspace(workspace_id=self.workspace_id, file_id=file_id)
            if file is None or file.expired or file.size_bytes > MAX_ATTACHMENT_BYTES:
                self.cache[file_id] = None
            else:
                with file_content(file) as stream:
                    self.cache[file_id] = (file, stream.read())
        return self.cache[file_id]


def _blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    nested = [
        inner for block in content if block.get("type") == "tool_result" for inner in _blocks(block.get("content"))
    ]
    return [*content, *nested]


def _names_a_file(block: dict[str, Any]) -> bool:
    source = block.get("source")
    return block.get("type") in ("image", "document") and isinstance(source, dict) and source.get("type") == "file"
