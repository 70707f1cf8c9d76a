"""Admin pieces shared by the apps (idempotency keys themselves are internal and get no page)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest


class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    """An inline that staff never add to or delete from; its fields are read-only unless it names
    `readonly_fields` itself (then the rest stay editable)."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields or self.fields or ()

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
