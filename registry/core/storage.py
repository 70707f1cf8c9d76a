"""Bytes of files and skill bundles, kept through Django's storage API (`storages["default"]`).

The default is a FileSystemStorage under the data directory; STORAGES in the settings can swap in an
object store without touching this code. Writes are staged: a failed request leaves no bytes behind.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from django.core.files import File as DjangoFile
from django.core.files.storage import Storage, storages
from django.db import transaction


def upload_storage() -> Storage:
    """The storage backend of uploads, looked up on each use so a settings change takes effect."""
    return storages["default"]


class StagedWrites:
    """Saves objects; if the `with` block raises, every object it saved is deleted again."""

    def __init__(self) -> None:
        self.storage = upload_storage()
        self.saved: list[str] = []

    def save(self, name: str, content: DjangoFile) -> str:  # type: ignore[type-arg]
        """Store `content` under `name` (or a free variant of it) and return the name actually used."""
        saved = self.storage.save(name, content)
        self.saved.append(saved)
        return saved

    def __enter__(self) -> StagedWrites:
        return self

    def __exit__(
        self, error_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if error_type is not None:
            for name in self.saved:
                self.storage.delete(name)


def delete_after_commit(names: Iterable[str]) -> None:
    """Delete stored objects once the transaction that dropped their rows commits (never before)."""
    doomed = list(names)

    def delete() -> None:
        storage = upload_storage()
        for name in doomed:
            storage.delete(name)

    transaction.on_commit(delete)
