"""Uploads in tests: multipart bodies written by hand (filenames verbatim) and the objects a storage holds."""

from __future__ import annotations

from pathlib import Path


def stored_objects(location: Path) -> list[Path]:
    return [path for path in location.rglob("*") if path.is_file()] if location.exists() else []


def multipart(parts: list[tuple[str, str | None, str | None, bytes]], boundary: str = "b0undary") -> tuple[bytes, str]:
    """A multipart body from (field name, filename, content type, bytes), filenames sent verbatim."""
    body = b""
    for name, filename, content_type, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        headers = f"Content-Disposition: {disposition}\r\n" + (
            f"Content-Type: {content_type}\r\n" if content_type else ""
        )
        body += f"--{boundary}\r\n{headers}\r\n".encode() + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"
