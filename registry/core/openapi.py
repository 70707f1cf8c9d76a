"""OpenAPI pieces shared by the registry's list endpoints."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import is_serializer
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import serializers


def list_response(name: str, item: type[serializers.BaseSerializer[Any]], *, with_prev_page: bool = False) -> Any:
    """The documented shape of a list: `{"data": [...], "next_page": ...}` (and `prev_page`)."""
    fields: dict[str, serializers.Field[Any, Any, Any, Any]] = {
        "data": item(many=True),
        "next_page": serializers.CharField(allow_null=True),
    }
    if with_prev_page:
        fields["prev_page"] = serializers.CharField(allow_null=True)
    # many=False: the envelope is one object, though spectacular wraps a `list` action's response in an array.
    return extend_schema_serializer(many=False)(inline_serializer(name, fields))  # type: ignore[type-var]


def list_schema(
    name: str,
    item: type[serializers.BaseSerializer[Any]],
    *parameters: OpenApiParameter,
    with_prev_page: bool = False,
) -> Any:
    """The OpenAPI description of a list action: its query `parameters`, and its answer (`list_response`)."""
    return extend_schema(
        parameters=list(parameters), responses=list_response(name, item, with_prev_page=with_prev_page)
    )


def deleted_response(resource_type: str) -> Any:
    """The documented `{"id", "type": "<resource>_deleted"}` answer of a delete."""
    name = "".join(part.title() for part in resource_type.split("_")) + "Deleted"
    return inline_serializer(
        name, {"id": serializers.CharField(), "type": serializers.ChoiceField(choices=[f"{resource_type}_deleted"])}
    )


def resource_schema(
    resource_type: str,
    *,
    read: type[serializers.Serializer[Any]],
    write: type[serializers.Serializer[Any]],
    update: type[serializers.Serializer[Any]] | None = None,
    deletable: bool = True,
    with_prev_page: bool = False,
) -> Any:
    """The OpenAPI description of a standard resource family's viewset (create, update, get, list, delete)."""
    name = "".join(part.title() for part in resource_type.split("_"))
    operations = {
        "create": extend_schema(request=write, responses=read),
        "partial_update": extend_schema(request=update or write, responses=read),
        "retrieve": extend_schema(responses=read),
        "list": list_schema(f"{name}List", read, *LIST_PARAMETERS, with_prev_page=with_prev_page),
    }
    if deletable:
        operations["destroy"] = extend_schema(responses=deleted_response(resource_type))
    return extend_schema_view(**operations)


LIST_PARAMETERS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="Page size, 1 to 100 (default 20)."),
    OpenApiParameter("page", OpenApiTypes.STR, description="Opaque cursor from a previous page."),
    OpenApiParameter("order", OpenApiTypes.STR, enum=["asc", "desc"], description="Sort by creation time."),
    OpenApiParameter("include_archived", OpenApiTypes.BOOL, description="Include archived items."),
]


class WorkspaceAuthenticationScheme(OpenApiAuthenticationExtension):  # type: ignore[misc]
    """Documents the two credentials: `x-api-key` (workspace key) and an OIDC Bearer token."""

    target_class = "registry.workspaces.authentication.WorkspaceAuthentication"
    name = ["ApiKeyAuth", "BearerAuth"]

    def get_security_definition(self, auto_schema: object) -> list[dict[str, str]]:
        return [
            {"type": "apiKey", "in": "header", "name": "x-api-key"},
            {"type": "http", "scheme": "bearer", "description": "An OIDC access token."},
        ]


class RegistrySchema(AutoSchema):  # type: ignore[misc]
    """Operation ids named after the resource and action (`agent_create`, `agent_partial_update`, ...)."""

    def get_operation_id(self) -> str:
        resource = getattr(self.view, "operation_name", None) or getattr(self.view, "resource_type", None)
        action = getattr(self.view, "action", None)
        if resource and action:
            return f"{resource}_{action}"
        return str(super().get_operation_id())

    def _get_response_bodies(self, direction: Any = "response") -> Any:
        """A single documented response is a 200: creates answer 200 (as the reference client expects)
        and deletes answer 200 with a body, where spectacular would assume 201 and an empty 204."""
        responses = self.get_response_serializers()
        if is_serializer(responses) or isinstance(responses, OpenApiResponse):
            return {"200": self._get_response_for_code(responses, "200", direction=direction)}
        return super()._get_response_bodies(direction)
