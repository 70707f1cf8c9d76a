"""Extension-group endpoints: policy (guardrails, guardrail types), pricing (model prices), runtime
(harnesses). A group this deployment does not serve answers 404, like a path that does not exist."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core.callers import IsOrganizationAdmin, IsWorkspaceMember
from registry.core.errors import not_found
from registry.core.fields import validated
from registry.core.openapi import list_schema
from registry.core.views import WorkspaceViewSet
from registry.discovery.selectors import served_groups
from registry.extensions import selectors, services
from registry.extensions.catalog import GUARDRAIL_TYPES, HARNESSES
from registry.extensions.models import Guardrail, ModelPrice
from registry.extensions.serializers import (
    GuardrailSerializer,
    GuardrailWriteSerializer,
    ModelPriceSerializer,
    ModelPriceWriteSerializer,
)

WRITES = ("create", "partial_update", "destroy")


class ExtensionViewSet(WorkspaceViewSet):
    """Base: the group in the path must be served; writes need an organization-admin key."""

    group_short: str
    archivable = False

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("group") != f"{self.group_short}.{self.group_domain()}" or kwargs["group"] not in served_groups():
            raise not_found(f"API group {kwargs.get('group')} is not served by this deployment.")
        super().initial(request, *args, **kwargs)

    @staticmethod
    def group_domain() -> str:
        return str(settings.REGISTRY_EXTENSION_DOMAIN)

    def get_permissions(self) -> list[Any]:
        return [IsOrganizationAdmin()] if self.action in WRITES else [IsWorkspaceMember()]

    @staticmethod
    def listing(data: list[Any]) -> Response:
        return Response({"data": data, "next_page": None})


class GuardrailViewSet(ExtensionViewSet):
    """`/apis/policy.<domain>/v1/guardrails[/{id}]`."""

    group_short = "policy"
    model = Guardrail
    resource_type = "guardrail"
    serializer_class = GuardrailSerializer

    def guardrail(self) -> Guardrail:
        found = [
            item
            for item in selectors.visible_guardrails(self.principal.workspace_id)
            if str(item.pk) == self.kwargs["id"]
        ]
        if not found:
            raise not_found(f"Guardrail {self.kwargs['id']} not found.")
        return found[0]

    @list_schema("GuardrailList", GuardrailSerializer)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.listing(self.render_many(selectors.visible_guardrails(self.principal.workspace_id)))

    @extend_schema(responses=GuardrailSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.guardrail()))

    @extend_schema(request=GuardrailWriteSerializer, responses=GuardrailSerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        values = validated(GuardrailWriteSerializer, request.data)
        return Response(self.render(services.guardrail_create(values=values)))

    @extend_schema(request=GuardrailWriteSerializer, responses=GuardrailSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        guardrail = self.guardrail()
        values = validated(GuardrailWriteSerializer, request.data, instance=guardrail, partial=True)
        return Response(self.render(services.guardrail_update(guardrail=guardrail, values=values)))

    @extend_schema(responses={200: dict})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        guardrail = self.guardrail()
        identifier = str(guardrail.pk)
        services.guardrail_delete(guardrail=guardrail)
        return Response({"id": identifier, "type": "guardrail_deleted"})


class GuardrailTypeViewSet(ExtensionViewSet):
    """`/apis/policy.<domain>/v1/guardrailtypes[/{name}]`: the catalog of guardrail types."""

    group_short = "policy"
    model = Guardrail
    resource_type = "guardrail_type"

    @staticmethod
    def render(name: str) -> dict[str, Any]:
        return {"type": "guardrail_type", "name": name, **GUARDRAIL_TYPES[name]}

    @extend_schema(responses={200: dict})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.listing([self.render(name) for name in sorted(GUARDRAIL_TYPES)])

    @extend_schema(responses={200: dict})
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if kwargs["name"] not in GUARDRAIL_TYPES:
            raise not_found(f"Guardrail type {kwargs['name']} not found.")
        return Response(self.render(kwargs["name"]))


class ModelPriceViewSet(ExtensionViewSet):
    """`/apis/pricing.<domain>/v1/modelprices`: effective prices (read); dated price rows (admin writes)."""

    group_short = "pricing"
    model = ModelPrice
    resource_type = "model_price"
    serializer_class = ModelPriceSerializer

    @list_schema("ModelPriceList", ModelPriceSerializer)
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        prices = selectors.effective_prices(
            provider=request.query_params.get("provider"), model=request.query_params.get("model")
        )
        return self.listing(self.render_many(prices))

    @extend_schema(request=ModelPriceWriteSerializer, responses=ModelPriceSerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        values = validated(ModelPriceWriteSerializer, request.data)
        return Response(self.render(services.model_price_create(values=values)))

    @extend_schema(responses={200: dict})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.model_price_delete(price_id=kwargs["id"])
        return Response({"id": kwargs["id"], "type": "model_price_deleted"})


class HarnessViewSet(ExtensionViewSet):
    """`/apis/runtime.<domain>/v1/harnesses`: the harness catalog."""

    group_short = "runtime"
    model = Guardrail
    resource_type = "harness"

    @extend_schema(responses={200: dict})
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.listing([{"type": "harness", **harness} for harness in HARNESSES])
