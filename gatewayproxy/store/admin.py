"""Django admin for the gateway's config rows. A save is validated like an admin-plane write: the whole
document with the candidate row must pass, or the form shows every problem and nothing is saved.

The gateway's config is global (it serves every workspace), so only superusers see or write these pages;
workspace staff (registry.workspaces.staff) never do."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.store import selectors, services
from gatewayproxy.store.document import EntryKey, EntryMissing, validated, without_entry
from gatewayproxy.store.models import ConfigVersion, Destination, PluginInstance, RateLimit, Route, Section, Vault


class EntryForm(forms.ModelForm):  # type: ignore[type-arg]
    """Checks that the whole config stays valid with this row in it (a rename replaces the old entry)."""

    collection: ClassVar[str]
    previous_key: EntryKey | None = None

    def entry_key(self, row: models.Model | dict[str, Any]) -> EntryKey:
        """The document entry a row (or the cleaned form data) stands for."""

        def value(field: str) -> Any:
            return row.get(field) if isinstance(row, dict) else getattr(row, field, None)

        return EntryKey(self.collection, str(value("name")), value("slot"))

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if self.errors:
            return cleaned
        self.previous_key = self.entry_key(self.instance) if self.instance.pk else None
        body: Any = cleaned.get("body")
        try:
            validated(
                selectors.document_with_entry(key=self.entry_key(cleaned), body=body, previous=self.previous_key),
                source=selectors.config_source(),
            )
        except ConfigError as error:
            raise ValidationError(error.problems) from None
        return cleaned


class SuperusersOnly(admin.ModelAdmin):  # type: ignore[type-arg]
    """A page of global config: superusers see and write it (with Django's model permissions ignored), nobody
    else reaches it."""

    @staticmethod
    def superuser(request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.superuser(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.superuser(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.superuser(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.superuser(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.superuser(request)


class EntryAdmin(SuperusersOnly):
    """Saves and deletes go through the store services, so the version moves and gateways reload."""

    collection: ClassVar[str]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        key = form.entry_key(obj)
        services.config_entry_put(key=key, body=obj.body, previous=form.previous_key)
        saved = selectors.entry_rows(key).get()
        obj.pk, obj.body = saved.pk, saved.body

    def entry_key(self, obj: Any) -> EntryKey:
        """The document entry a row stands for."""
        return EntryKey(self.collection, obj.name, getattr(obj, "slot", None))

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        row = self.get_object(request, object_id)
        if request.method == "POST" and row is not None:
            try:
                validated(
                    without_entry(selectors.stored_document(), self.entry_key(row)), source=selectors.config_source()
                )
            except ConfigError as error:
                self.message_user(request, "not deleted: " + "; ".join(error.problems), level=messages.ERROR)
                opts = self.model._meta
                return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[row.pk]))
        return super().delete_view(request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with contextlib.suppress(EntryMissing):  # already gone
            services.config_entry_delete(key=self.entry_key(obj))

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # a bulk delete would skip the whole-document check
        return actions


def _register(model: type[models.Model], collection: str, *columns: str) -> None:
    meta = type("Meta", (), {"model": model, "fields": "__all__"})
    form = type(f"{model.__name__}Form", (EntryForm,), {"collection": collection, "Meta": meta})
    admin.site.register(
        model,
        type(
            f"{model.__name__}Admin",
            (EntryAdmin,),
            {
                "collection": collection,
                "form": form,
                "list_display": ("name", *columns),
                "readonly_fields": ("position",) if "position" in columns else (),
            },
        ),
    )


_register(Section, "sections")
_register(Destination, "destinations")
_register(Route, "routes", "position")
_register(RateLimit, "rate_limits", "position")
_register(Vault, "vaults")
_register(PluginInstance, "plugins", "slot", "position")


@admin.register(ConfigVersion)
class ConfigVersionAdmin(SuperusersOnly):
    """The version counter, read-only: every save above moves it."""

    list_display = ("number", "updated_at")
    readonly_fields = ("number", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
