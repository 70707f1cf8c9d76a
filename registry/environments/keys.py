"""The keys of a self_hosted environment, in the `runtime` extension group (issue 26):

    GET  /apis/runtime.<domain>/v1/environments/{environment_id}/keys            list (`include_revoked`)
    POST /apis/runtime.<domain>/v1/environments/{environment_id}/keys            mint: the plaintext is in `key`,
                                                                                 in this response only
    GET  /apis/runtime.<domain>/v1/environments/{environment_id}/keys/{id}       one key
    POST /apis/runtime.<domain>/v1/environments/{environment_id}/keys/{id}/revoke  refused on its next use

A workspace credential (API key, OIDC) of the environment's workspace reaches them; a scoped credential (an
environment key, a work secret) reaches none (the default permission refuses it). The same keys are minted
by `manage.py environment_key` and on the admin's environment key page.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db.models import QuerySet
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.errors import not_found
from registry.core.fields import StrictCharField, StrictSerializer, validated
from registry.core.openapi import list_schema
from registry.core.pagination import KeysetPagination
from registry.core.serialization import ConstantField, CreatedObjectSerializer
from registry.core.views import WorkspaceViewSet, parse_bool
from registry.discovery.selectors import served_groups
from registry.environments import services
from registry.environments.models import Environment
from registry.workspaces import scoped_credentials
from registry.workspaces.models import EnvironmentKey


class EnvironmentKeySerializer(CreatedObjectSerializer):
    """A key of a self_hosted environment: never its plaintext, which only the mint response carries (`key`)."""

    type = ConstantField("environment_key")
    environment_id = serializers.CharField()
    name = serializers.CharField()
    display_prefix = serializers.CharField()
    last_used_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)


class EnvironmentKeyCreateSerializer(StrictSerializer):
    name = StrictCharField(max_length=255, required=False, allow_blank=True, default="")


class EnvironmentKeyViewSet(WorkspaceViewSet):
    group_short: ClassVar[str] = "runtime"
    model = EnvironmentKey
    resource_type = "environment_key"
    operation_name = "environment_key"
    serializer_class = EnvironmentKeySerializer
    archivable = False
    pagination = KeysetPagination(default_order="asc")

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        group = kwargs.get("group")
        if group != f"{self.group_short}.{settings.REGISTRY_EXTENSION_DOMAIN}" or group not in served_groups():
            raise not_found(f"API group {group} is not served by this deployment.")
        super().initial(request, *args, **kwargs)

    def environment(self) -> Environment:
        environment = (
            Environment.objects.select_related("workspace")
            .filter(workspace_id=self.principal.workspace_id, pk=self.kwargs["environment_id"])
            .first()
        )
        if environment is None:
            raise not_found(f"Environment {self.kwargs['environment_id']} not found.")
        return environment

    def get_queryset(self) -> QuerySet[EnvironmentKey]:
        if getattr(self, "swagger_fake_view", False):
            return EnvironmentKey.objects.none()
        return EnvironmentKey.objects.filter(
            workspace_id=self.principal.workspace_id, environment_id=self.kwargs["environment_id"]
        )

    def get_object(self) -> EnvironmentKey:
        key = self.get_queryset().filter(pk=self.kwargs["id"]).first()
        if key is None:
            raise not_found(f"Environment key {self.kwargs['id']} not found.")
        return key

    @list_schema("EnvironmentKeyList", EnvironmentKeySerializer)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        self.environment()
        keys = self.get_queryset()
        if not parse_bool(request.query_params.get("include_revoked"), "include_revoked"):
            keys = keys.filter(revoked_at__isnull=True)
        rows, links = self.pagination.paginate(keys, request)
        return KeysetPagination.response(self.render_many(rows), links)

    @extend_schema(request=EnvironmentKeyCreateSerializer, responses=EnvironmentKeySerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        values = validated(EnvironmentKeyCreateSerializer, request.data)
        issued = services.environment_key_mint(environment=self.environment(), name=values["name"])
        return Response({**self.render(issued.environment_key), "key": issued.plaintext})

    @extend_schema(request=None, responses=EnvironmentKeySerializer)
    def revoke(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        key = scoped_credentials.environment_key_revoke(environment_key=self.get_object())
        return Response(self.render(key))


KEYS = "apis/<str:group>/v1/environments/<env_id:environment_id>/keys"

urlpatterns = [
    path(KEYS, EnvironmentKeyViewSet.as_view({"get": "list", "post": "create"}), name="environment-keys"),
    path(f"{KEYS}/<envkey_id:id>", EnvironmentKeyViewSet.as_view({"get": "retrieve"}), name="environment-key"),
    path(
        f"{KEYS}/<envkey_id:id>/revoke",
        EnvironmentKeyViewSet.as_view({"post": "revoke"}),
        name="environment-key-revoke",
    ),
]
