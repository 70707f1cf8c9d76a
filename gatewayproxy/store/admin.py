"""Django admin for the gateway's config rows. A save is validated like an admin-plane write: the whole
document with the candidate row must pass, or the form shows every problem and nothing is saved.

Each JSON box is pretty-printed, with the allowed keys of its body (types, defaults, descriptions) under it,
generated from the typed config's schema. Every save and delete records a revision (who, when, before and
after); an entry's history page shows them with a diff, and rolls the entry back to one of them through the
same services (a rollback that would make the config invalid is refused, showing why). When the running gateway
serves a file rather than these rows (`manage.py up --gateway-config FILE`), every page says so.

The gateway's config is global (it serves every workspace), so only superusers see or write these pages;
workspace staff (registry.workspaces.staff) never do."""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from typing import Any, ClassVar
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from gatewayproxy.config.loader import ConfigError
from gatewayproxy.store import selectors, services
from gatewayproxy.store.document import (
    SINGLETON_SECTIONS,
    EntryKey,
    EntryMissing,
    entry_body,
    validated,
    without_entry,
)
from gatewayproxy.store.help import entry_help
from gatewayproxy.store.models import (
    ROW_MODELS,
    ConfigRevision,
    ConfigVersion,
    Destination,
    PluginInstance,
    RateLimit,
    Route,
    Section,
    Vault,
)

# Set by `manage.py up --gateway-config FILE` for the registry it starts: the file its gateway serves.
SERVED_FILE_VARIABLE = "GATEWAY_SERVES_FILE"
ENTRY_URL = "store_configrevision_entry"  # the URL name of an entry's history page


def served_file() -> str | None:
    """The config file the running gateway serves instead of the database rows, when known."""
    return os.environ.get(SERVED_FILE_VARIABLE) or None


def pretty(body: Any) -> str:
    """A JSON body as the pages show it: indented, keys sorted."""
    return json.dumps(body, indent=2, sort_keys=True, ensure_ascii=False)


def unified_diff(before: Any, after: Any, *, old: str = "before", new: str = "after") -> str:
    """The unified diff of two bodies' pretty JSON (an absent body is empty)."""

    def lines(body: Any) -> list[str]:
        return pretty(body).splitlines() if body is not None else []

    return "\n".join(difflib.unified_diff(lines(before), lines(after), fromfile=old, tofile=new, lineterm=""))


def entry_history_url(key: EntryKey, revision: ConfigRevision | None = None) -> str:
    """The history page of an entry (at one revision, with one)."""
    url = reverse(f"admin:{ENTRY_URL}", args=[key.collection, key.name])
    query = f"?{urlencode({'slot': key.slot})}" if key.slot else ""
    return url + query + (f"#revision-{revision.pk}" if revision is not None else "")


class PrettyJSONField(forms.JSONField):
    """A JSON box showing its value indented."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        return pretty(value)


class EntryForm(forms.ModelForm):  # type: ignore[type-arg]
    """Checks that the whole config stays valid with this row in it (a rename replaces the old entry)."""

    collection: ClassVar[str]
    previous_key: EntryKey | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        body = self.fields["body"]
        self.fields["body"] = PrettyJSONField(
            required=body.required, initial=body.initial, label=body.label, help_text=self.body_help()
        )
        self.fields["body"].widget.attrs.update(rows=16, cols=100, spellcheck="false")

    def body_help(self) -> str:
        """The allowed keys of this body (for a new section: of every section), from the config's schema."""
        if self.collection != "sections":
            names: tuple[str | None, ...] = (None,)
        else:
            names = (self.instance.name,) if self.instance.pk else SINGLETON_SECTIONS
        helps = [(name, entry_help(self.collection, name)) for name in names]
        return render_to_string("admin/store/schema_help.html", {"helps": helps})

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

    def page_context(self, request: HttpRequest, extra_context: Any = None) -> dict[str, Any]:
        """The context every page of the gateway's config adds: which config the running gateway serves."""
        return {**(extra_context or {}), "served_file": served_file()}

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        return super().changelist_view(request, self.page_context(request, extra_context))

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> Any:
        return super().changeform_view(request, object_id, form_url, self.page_context(request, extra_context))

    @staticmethod
    def by(request: HttpRequest, origin: str = "admin") -> services.Provenance:
        """The provenance of a write this page makes for the request's user."""
        return services.Provenance(origin=origin, user=request.user)


class EntryAdmin(SuperusersOnly):
    """Saves and deletes go through the store services, so the version moves, gateways reload and a revision is
    recorded; the log entry of a save links to its revision, and the History button shows the revisions."""

    collection: ClassVar[str]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        key = form.entry_key(obj)
        stored = services.config_entry_put(key=key, body=obj.body, previous=form.previous_key, by=self.by(request))
        saved = selectors.entry_rows(key).get()
        obj.pk, obj.body, obj.revision = saved.pk, saved.body, stored.revision

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> LogEntry:
        return super().log_addition(request, obj, self.with_revision(obj, message))

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> LogEntry:
        return super().log_change(request, obj, self.with_revision(obj, message))

    @staticmethod
    def with_revision(obj: Any, message: Any) -> Any:
        """A log message that also links to the revision the save recorded (unchanged without one)."""
        revision = getattr(obj, "revision", None)
        if revision is None:
            return message
        said = LogEntry(change_message=json.dumps(message) if isinstance(message, list) else message)
        link = entry_history_url(revision.key, revision)
        return f"{said.get_change_message() or 'Saved'} Revision {revision.pk}: {link}"

    def history_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        row = self.get_object(request, object_id)
        if row is None or not self.has_view_permission(request, row):
            raise PermissionDenied
        return HttpResponseRedirect(entry_history_url(self.entry_key(row)))

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
            services.config_entry_delete(key=self.entry_key(obj), by=self.by(request))

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


@admin.register(ConfigRevision)
class ConfigRevisionAdmin(SuperusersOnly):
    """Every recorded change of an entry, read-only; an entry's history page shows its revisions with a diff
    each and rolls the entry back to one of them (confirmed, posted, written through the services)."""

    list_display = ("pk", "created_at", "entry", "origin", "author_name", "version")
    list_filter = ("collection", "origin")
    search_fields = ("name", "author_name")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="entry")
    def entry(self, revision: ConfigRevision) -> str:
        return format_html('<a href="{}">{}</a>', entry_history_url(revision.key, revision), revision.key)

    def get_urls(self) -> list[Any]:
        admin_view = self.admin_site.admin_view  # logged in, CSRF-protected, never cached
        return [
            path("entry/<str:collection>/<path:name>/", admin_view(self.entry_history_view), name=ENTRY_URL),
            path("<int:revision_id>/rollback/", admin_view(self.rollback_view), name="store_configrevision_rollback"),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        self.allowed(request)
        revision = get_object_or_404(ConfigRevision, pk=object_id)
        return HttpResponseRedirect(entry_history_url(revision.key, revision))

    def allowed(self, request: HttpRequest) -> None:
        """Refuse anyone but a superuser (the views below are this page's own, outside Django's checks)."""
        if not self.superuser(request):
            raise PermissionDenied

    def page(self, request: HttpRequest, template: str, title: str, **context: Any) -> TemplateResponse:
        """One of this page's own views, in the admin's frame."""
        frame = {**self.admin_site.each_context(request), **self.page_context(request), "opts": self.opts}
        return TemplateResponse(request, template, {**frame, "title": title, **context})

    def entry_history_view(self, request: HttpRequest, collection: str, name: str) -> HttpResponse:
        """The revisions of one entry, newest first, each with the diff of what it changed."""
        self.allowed(request)
        key = EntryKey(collection, name, request.GET.get("slot") or None)
        revisions = [
            {"revision": revision, "diff": unified_diff(revision.before, revision.after)}
            for revision in selectors.entry_revisions(key)
        ]
        row = selectors.entry_rows(key).first() if collection in ROW_MODELS else None
        row_url = reverse(f"admin:store_{row._meta.model_name}_change", args=[row.pk]) if row is not None else None
        return self.page(
            request,
            "admin/store/entry_history.html",
            f"History of {key}",
            key=key,
            revisions=revisions,
            row_url=row_url,
        )

    def rollback_view(self, request: HttpRequest, revision_id: int) -> HttpResponse:
        """GET: what rolling the entry back to the revision changes, and a form to confirm; POST: do it."""
        self.allowed(request)
        revision = get_object_or_404(ConfigRevision, pk=revision_id)
        problems: list[str] = []
        if request.method == "POST":
            try:
                return self.rolled_back(request, revision)
            except ConfigError as error:
                problems = list(error.problems)
        now = entry_body(selectors.stored_document(), revision.key)
        diff = unified_diff(now, revision.after, old="now", new=f"revision {revision.pk}")
        return self.page(
            request,
            "admin/store/rollback_confirm.html",
            f"Roll {revision.key} back to revision {revision.pk}",
            revision=revision,
            diff=diff,
            problems=problems,
            history_url=entry_history_url(revision.key),
        )

    def rolled_back(self, request: HttpRequest, revision: ConfigRevision) -> HttpResponse:
        """Roll back through the services, log it (linking to the new revision) and go back to the history."""
        try:
            stored = services.config_revision_rollback(revision=revision, by=self.by(request, "rollback"))
        except EntryMissing:
            self.message_user(request, f"{revision.key} is already absent: nothing to roll back.", messages.WARNING)
            return HttpResponseRedirect(entry_history_url(revision.key))
        if stored.revision is None:
            self.message_user(request, f"{revision.key} already is as revision {revision.pk} left it.", messages.INFO)
            return HttpResponseRedirect(entry_history_url(revision.key))
        said = (
            f"Rolled {revision.key} back to revision {revision.pk}. "
            f"Revision {stored.revision.pk}: {entry_history_url(revision.key, stored.revision)}"
        )
        row = selectors.entry_rows(revision.key).first()
        self.log_change(request, row if row is not None else stored.revision, said)
        self.message_user(request, said, messages.SUCCESS)
        return HttpResponseRedirect(entry_history_url(revision.key, stored.revision))
