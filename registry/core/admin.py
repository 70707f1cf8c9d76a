"""Admin pieces shared by the apps: the staff scoping every registry page uses (querysets, change URLs, form
choices, autocomplete, actions and permissions narrowed to the workspaces a staff member holds a role in),
writes through the API's serializers and the apps' services, confirmed actions, read-only inlines and pages,
links between pages and the archived filter (idempotency keys themselves are internal and get no page)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import model_ngettext, quote
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from rest_framework import serializers
from rest_framework.exceptions import APIException

from registry.core.services import resource_archive, resource_delete
from registry.core.views import WriteServices

# -- who reaches which workspace ----------------------------------------------------------------------------
# Asked with one of the permissions "view", "act" (actions on sessions and the like), "add", "change",
# "delete"; answers the ids of the workspaces where the user holds it, or None for every workspace.
StaffAccess = Callable[[Any, str], "set[str] | None"]


def superusers_only(user: Any, permission: str) -> set[str] | None:
    """The access before the workspaces app says otherwise: superusers everywhere, anyone else nowhere."""
    return None if user.is_active and user.is_superuser else set()


_staff_access: list[StaffAccess] = [superusers_only]


def use_staff_access(access: StaffAccess) -> None:
    """Set who holds which permission where; the workspaces app does at start-up (the core sits below it)."""
    _staff_access[0] = access


def is_superuser(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_superuser)


def staff_reach(request: HttpRequest, permission: str) -> set[str] | None:
    """The workspaces where the request's user holds `permission` (None: every one), asked once per request."""
    asked: dict[str, set[str] | None] = vars(request).setdefault("_staff_reach", {})
    if permission not in asked:
        asked[permission] = _staff_access[0](request.user, permission)
    return asked[permission]


def problems(detail: Any, prefix: str = "") -> list[str]:
    """The messages of a DRF error detail (nested dicts and lists), each after the path of its field."""
    if isinstance(detail, dict):
        return [text for key, value in detail.items() for text in problems(value, f"{prefix}{key}: ")]
    if isinstance(detail, list):
        return [text for item in detail for text in problems(item, prefix)]
    return [f"{prefix}{detail}"]


# -- the base of every registry page --------------------------------------------------------------------------
class StaffScopedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A staff member reaches only the workspaces they hold a role in, superusers every one.

    `workspace_path` is the lookup from the model to its workspace ("pk" on the workspace itself, None for
    organization-wide rows, which only superusers reach; so does a page with `superusers_only`). The list,
    the change URL, autocomplete (which lists the target page's queryset), form choices and actions are
    narrowed to it; permissions follow the role. The field leading to the workspace is read-only once the
    object exists; deletions go one by one through `delete_model` (where an app's service cleans up), and a
    refusal a service raises is shown as a message, never a server error.
    """

    workspace_path: ClassVar[str | None] = "workspace"
    superusers_only: ClassVar[bool] = False

    # -- reach and permissions ------------------------------------------------------------------------------
    def reach(self, request: HttpRequest, permission: str) -> set[str] | None:
        if self.workspace_path is None or self.superusers_only:
            return None if is_superuser(request) else set()
        return staff_reach(request, permission)

    def within(self, queryset: QuerySet[Any], workspace_ids: set[str] | None) -> QuerySet[Any]:
        """`queryset` narrowed to the rows of these workspaces (None: unchanged)."""
        if workspace_ids is None:
            return queryset
        return queryset.filter(**{f"{self.workspace_path}__in": workspace_ids})

    def workspace_of(self, obj: Any) -> str:
        *hops, last = str(self.workspace_path).split("__")
        for hop in hops:
            obj = getattr(obj, hop)
        return str(obj.pk if last == "pk" else getattr(obj, f"{last}_id"))

    def permits(self, request: HttpRequest, permission: str, obj: Any = None) -> bool:
        """Whether the user holds `permission` on `obj`, or (without one) in some workspace."""
        reach = self.reach(request, permission)
        if reach is None:
            return True
        return bool(reach) and (obj is None or self.workspace_of(obj) in reach)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.permits(request, "view")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "view", obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.permits(request, "add")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "change", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "delete", obj)

    # -- what the pages show ----------------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = self.within(super().get_queryset(request), self.reach(request, "view"))
        return queryset if queryset.ordered else queryset.order_by("-pk")  # autocomplete pages through it

    def choices(self, request: HttpRequest, model: type[Model]) -> QuerySet[Any]:
        """What a form of this page may point at: rows of `model` in the workspaces where the user may change
        this page's objects."""
        queryset = model._default_manager.all()
        reach = self.reach(request, "change")
        if reach is None:
            return queryset
        target = self.admin_site.get_model_admin(model) if self.admin_site.is_registered(model) else None
        if isinstance(target, StaffScopedAdmin) and target.workspace_path is not None:
            return target.within(queryset, reach)
        return queryset.none()

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("queryset", self.choices(request, db_field.remote_field.model))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("queryset", self.choices(request, db_field.remote_field.model))
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_list_filter(self, request: HttpRequest) -> Any:
        """The page's filters, and the workspace for those who reach more than one."""
        filters = tuple(super().get_list_filter(request))
        reach = self.reach(request, "view")
        if self.workspace_path in (None, "pk") or (reach is not None and len(reach) < 2):
            return filters
        return (*filters, (self.workspace_path, admin.RelatedOnlyFieldListFilter))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        tenancy = str(self.workspace_path).split("__")[0]
        if obj is None or self.workspace_path in (None, "pk") or tenancy in fields:
            return fields
        return (*fields, tenancy)

    # -- writes ---------------------------------------------------------------------------------------------
    def refusals_shown(self, request: HttpRequest, view: Callable[..., Any], *args: Any) -> Any:
        """`view(*args)`; a refusal an app's service raises (its transaction rolled back) becomes an error
        message on the page it came from."""
        try:
            return view(*args)
        except APIException as refusal:
            self.message_user(request, "Not done: " + "; ".join(problems(refusal.detail)), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> Any:
        return self.refusals_shown(request, super().changeform_view, request, object_id, form_url, extra_context)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> Any:
        return self.refusals_shown(request, super().delete_view, request, object_id, extra_context)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        resource_delete(instance=obj)  # as the API's delete; a page whose rows keep more has its app's service

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    # -- actions --------------------------------------------------------------------------------------------
    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        found: dict[str, Any] = super().get_actions(request)
        return {name: (self.narrowed(function), name, text) for name, (function, _, text) in found.items()}

    @staticmethod
    def narrowed(function: Callable[..., Any]) -> Callable[..., Any]:
        """The action `function`, run on those of the chosen objects the user holds its permissions on
        ("change" when it names none)."""
        permissions = getattr(function, "allowed_permissions", ("change",))

        @functools.wraps(function)
        def action(model_admin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
            allowed = [
                obj.pk
                for obj in queryset
                if all(getattr(model_admin, f"has_{name}_permission")(request, obj) for name in permissions)
            ]
            return model_admin.refusals_shown(request, function, model_admin, request, queryset.filter(pk__in=allowed))

        return action

    def confirmed(
        self,
        request: HttpRequest,
        queryset: QuerySet[Any],
        *,
        action: str,
        verb: str,
        done: str,
        perform: Callable[[Any], Any],
    ) -> HttpResponse | None:
        """An action in two steps: a page lists the chosen objects and asks; confirmed, `perform` takes each
        (logged as a change of it) and a message says how many."""
        if request.POST.get("confirmed") != "yes":
            count = queryset.count()
            context = {
                **self.admin_site.each_context(request),
                "title": f"{verb} {model_ngettext(self.opts, count)}",
                "question": f"{verb} these {count} {model_ngettext(self.opts, count)}?",
                "opts": self.opts,
                "queryset": queryset,
                "action": action,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
            }
            return TemplateResponse(request, "admin/confirm_action.html", context)
        count = 0
        for obj in queryset:
            perform(obj)
            self.log_change(request, obj, done)
            count += 1
        self.message_user(request, f"{done} {count} {model_ngettext(self.opts, count)}.", messages.SUCCESS)
        return None


class RevocableKeyAdmin(StaffScopedAdmin):
    """A credential's page: issued through its service (the plaintext appears once, in a message), revoked
    by a confirmed action (`revoke_key`, the service's call); nothing else about a key changes, a revoked
    key stays revoked, and the row stays as its record (no delete)."""

    actions = ["revoke"]

    def revoke_key(self, key: Any) -> Any:
        raise NotImplementedError

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_revoke_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, "change", obj)

    @admin.action(description="Revoke selected %(verbose_name_plural)s", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        return self.confirmed(
            request, queryset, action="revoke", verb="Revoke", done="Revoked", perform=self.revoke_key
        )


class ReadOnlyAdmin(StaffScopedAdmin):
    """A page of objects that enter and change only through the API: staff read them (and delete them,
    unless `deletable` is False), never add or change them here."""

    deletable = True

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.deletable and super().has_delete_permission(request, obj)


class ArchivedFilter(admin.SimpleListFilter):
    """Archived or not, for every resource with `archived_at`."""

    title = "archived"
    parameter_name = "archived"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "No"), ("yes", "Yes")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in ("yes", "no"):
            return queryset
        return queryset.filter(archived_at__isnull=self.value() == "no")


class ArchivableAdmin(StaffScopedAdmin):
    """The page of a resource with `archived_at`: its list filters on archived first; `archived_at` changes
    only by the archive action (confirmed), through the app's service (`archive_one`), for those holding
    `archive_permission`."""

    archive_permission: ClassVar[str] = "change"
    actions = ["archive"]

    def get_list_filter(self, request: HttpRequest) -> Any:
        return (ArchivedFilter, *super().get_list_filter(request))

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields if "archived_at" in fields else (*fields, "archived_at")

    def has_archive_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.permits(request, self.archive_permission, obj)

    @admin.action(description="Archive selected %(verbose_name_plural)s", permissions=["archive"])
    def archive(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        return self.confirmed(
            request, queryset, action="archive", verb="Archive", done="Archived", perform=self.archive_one
        )

    def archive_one(self, obj: Any) -> None:
        resource_archive(instance=obj)


# -- writes through the API's serializers and the apps' services --------------------------------------------
def adopt(obj: Any, saved: Any) -> None:
    """Let an admin page go on with the row a service wrote instead of the one its form built."""
    for field in obj._meta.concrete_fields:
        setattr(obj, field.attname, getattr(saved, field.attname))


def metadata_patch(current: dict[str, str], wanted: Any) -> Any:
    """The API's metadata patch that turns `current` into `wanted` (a removed key is set to null)."""
    if not isinstance(wanted, dict):
        return wanted
    return {**dict.fromkeys(set(current) - set(wanted)), **wanted}


class ServiceForm(forms.ModelForm):  # type: ignore[type-arg]
    """A form whose values the API's write serializer validates: the fields the serializer knows make the body
    (on a change only those changed, `metadata` as the patch that yields the form's map), so the admin stores
    nothing the API would refuse. An empty JSON box means "not given" (the API's default), never
    "required"."""

    serializer_class: ClassVar[type[serializers.Serializer[Any]]]
    api_values: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            if isinstance(field, forms.JSONField):
                field.required = False

    @property
    def partial(self) -> bool:
        return not self.instance._state.adding

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if self.errors:
            return cleaned
        serializer = self.serializer_class(
            self.instance if self.partial else None, data=self.body(cleaned), partial=self.partial
        )
        if serializer.is_valid():
            self.api_values = dict(serializer.validated_data)
        for field, detail in serializer.errors.items():
            self.add_error(field if field in self.fields else None, problems(detail))
        return cleaned

    def body(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        """The API body of the form's values."""
        api_fields = self.serializer_class().fields
        body = {}
        for name in self.fields:
            if name not in api_fields or (self.partial and name not in self.changed_data):
                continue
            value = cleaned.get(name)
            if self.given(name, value, api_fields[name]):
                body[name] = self.default_of(name) if value is None else value
        if self.partial and "metadata" in body:
            body["metadata"] = metadata_patch(self.instance.metadata, body["metadata"])
        return body

    def given(self, name: str, value: Any, api_field: Any) -> bool:
        """Whether a value goes in the body: an empty JSON box does not (on a change, unless the field has a
        default, like metadata's {}); nor, on the add page, an optional one left at its default."""
        if not isinstance(self.fields[name], forms.JSONField):
            return True
        default = self.default_of(name)
        if self.partial:
            return value is not None or default is not None
        return value is not None and (api_field.required or value != default)

    def default_of(self, name: str) -> Any:
        return self.instance._meta.get_field(name).get_default()


class ServiceWriteAdmin(StaffScopedAdmin):
    """A page whose adds and changes go as the API's do: validated by `write_serializer` (`update_serializer`,
    partial, for a change) and saved by the app's `write_services` (a create gets the form's workspace, unless
    the rows are organization-wide)."""

    form = ServiceForm
    write_serializer: ClassVar[type[serializers.Serializer[Any]]]
    update_serializer: ClassVar[type[serializers.Serializer[Any]] | None] = None
    write_services: ClassVar[WriteServices]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        serializer = (self.update_serializer or self.write_serializer) if obj is not None else self.write_serializer
        return type(form.__name__, (form,), {"serializer_class": serializer})

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        adopt(obj, self.update_object(obj, form.api_values) if change else self.create_object(form))

    def create_object(self, form: Any) -> Any:
        tenancy = {"workspace": form.cleaned_data["workspace"]} if self.workspace_path else {}
        return self.write_services.create(**tenancy, values=form.api_values)

    def update_object(self, obj: Any, values: dict[str, Any]) -> Any:
        return self.write_services.update(**{self.write_services.keyword: obj}, values=values)


# -- inlines and links ----------------------------------------------------------------------------------------
class ReadOnlyInline(admin.TabularInline):  # type: ignore[type-arg]
    """An inline that staff only read: all its fields are read-only, and whoever may view the parent object
    may view it."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields or ()

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(self.admin_site.get_model_admin(self.parent_model).has_view_permission(request, obj))

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def change_link(model: type[Model], pk: Any, text: str) -> SafeString:
    """A link to one object's admin page (the key quoted as the admin quotes it: `_` is `_5F`)."""
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[quote(pk)])
    return format_html('<a href="{}">{}</a>', url, text)


def changelist_link(model: str, text: str, **filters: Any) -> SafeString:
    """A link to the admin list of `model` ("app_label.model_name", so that a page links to another app's
    list without importing it) narrowed by `filters` (field lookups, as the list's query string)."""
    app_label, model_name = model.lower().split(".")
    url = reverse(f"admin:{app_label}_{model_name}_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, urlencode(filters), text)
