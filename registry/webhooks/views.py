"""Webhook endpoints of the caller's workspace, in the shape of the reference client's organization webhook
endpoint resource, and their deliveries (our addition, for debugging a receiver):

- `POST /v1/webhooks` creates (the answer alone carries `signing_secret`), `GET /v1/webhooks` lists,
  `GET|POST|DELETE /v1/webhooks/{id}` reads, updates, deletes, and
  `POST /v1/webhooks/{id}/regenerate_signing_secret` answers `{"signing_secret"}` (the old one stops at once);
- `GET /v1/webhooks/{id}/deliveries` lists the endpoint's deliveries (`status`: pending|succeeded|failed),
  `GET /v1/webhooks/{id}/deliveries/{delivery_id}` reads one with its `attempts`, and
  `POST .../{delivery_id}/redeliver` sends it again (409 while the endpoint is disabled).

Lists answer both envelopes: the reference client's `SyncPage` (`data`, `has_more`, `first_id`, `last_id`;
query `after_id` / `before_id`, `limit` 0 to 100 where 0 means 20, `order` desc by default) and the registry's
(`next_page`, an opaque cursor for `page`; null after a `before_id` page). The rules of each write, and the
`error.details.error_code` of each refusal, are in `registry.webhooks.services`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_serializer, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core import idempotency
from registry.core.errors import exception_handler, invalid_request, not_found
from registry.core.fields import validated
from registry.core.openapi import deleted_response
from registry.core.pagination import MAX_LIMIT, decode_cursor_token, encode_cursor_token, parse_order
from registry.core.secrets import seal, unseal
from registry.core.views import DeleteMixin, WorkspaceViewSet
from registry.webhooks import selectors, services
from registry.webhooks.models import WebhookDelivery, WebhookEndpoint
from registry.webhooks.serializers import (
    NewWebhookEndpointSerializer,
    SigningSecretSerializer,
    WebhookDeliveryDetailSerializer,
    WebhookDeliverySerializer,
    WebhookEndpointCreateSerializer,
    WebhookEndpointSerializer,
    WebhookEndpointUpdateSerializer,
)

DEFAULT_LIMIT = 20
PAGE_PARAMETERS = [
    OpenApiParameter("limit", OpenApiTypes.INT, description="Page size, up to 100; 0 (the default) means 20."),
    OpenApiParameter("after_id", OpenApiTypes.STR, description="The page after this item."),
    OpenApiParameter("before_id", OpenApiTypes.STR, description="The first items that come before this one."),
    OpenApiParameter("order", OpenApiTypes.STR, enum=["asc", "desc"], description="By creation time; desc first."),
    OpenApiParameter("page", OpenApiTypes.STR, description="The opaque `next_page` of a previous page."),
]
STATUS_PARAMETER = OpenApiParameter(
    "status", OpenApiTypes.STR, enum=list(WebhookDelivery.Status.values), description="Only deliveries in it."
)
SEALED_SECRET_KEY = "signing_secret_sealed"


def page_response(name: str, item: type[serializers.BaseSerializer[Any]]) -> Any:
    """The documented page: the reference client's `SyncPage` fields and the registry's `next_page`."""
    fields: dict[str, serializers.Field[Any, Any, Any, Any]] = {
        "data": item(many=True),
        "has_more": serializers.BooleanField(),
        "first_id": serializers.CharField(allow_null=True),
        "last_id": serializers.CharField(allow_null=True),
        "next_page": serializers.CharField(allow_null=True),
    }
    return extend_schema_serializer(many=False)(inline_serializer(name, fields))  # type: ignore[type-var]


def parse_limit(raw: str | None) -> int:
    """`limit`: 1 to 100, or 0 / omitted for the default."""
    if raw in (None, ""):
        return DEFAULT_LIMIT
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_LIMIT:
        raise invalid_request(f"limit: must be an integer from 0 to {MAX_LIMIT} (0 means {DEFAULT_LIMIT}).")
    return int(raw) or DEFAULT_LIMIT


def paged(request: Request, queryset: Any, render: Callable[[Any], Any], cursors: Any = None) -> Response:
    """One page of `queryset` as the query asks, in both envelopes."""
    params = request.query_params
    limit = parse_limit(params.get("limit"))
    descending = parse_order(params.get("order"), "desc") == "desc"
    after_id = params.get("after_id") or None
    before_id = params.get("before_id") or None
    if params.get("page"):
        if after_id or before_id:
            raise invalid_request("page: give page, after_id or before_id, not more than one.")
        after_id = decode_cursor_token(params["page"])
    if after_id and before_id:
        raise invalid_request("after_id: give after_id or before_id, not both.")
    page = selectors.page_of(
        queryset, limit=limit, descending=descending, after_id=after_id, before_id=before_id, cursors=cursors
    )
    last_id: str | None = page.rows[-1].pk if page.rows else None
    return Response(
        {
            "data": [render(row) for row in page.rows],
            "has_more": page.has_more,
            "first_id": page.rows[0].pk if page.rows else None,
            "last_id": last_id,
            "next_page": encode_cursor_token(last_id) if last_id and page.has_more and before_id is None else None,
        }
    )


def refusal_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """The registry's envelope, with a `WebhookRefusal`'s code where the reference client reads it
    (`error.details.error_code`, and `error.error_code` as the registry's other coded refusals give it)."""
    response = exception_handler(exc, context)
    if isinstance(exc, services.WebhookRefusal):
        response.data["error"].update(error_code=exc.error_code.value, details={"error_code": exc.error_code.value})
    return response


class WebhookViewSet(WorkspaceViewSet):
    """What both webhook viewsets share: the workspace's endpoints, coded refusals, and a signing secret that an
    idempotency key's stored answer holds only sealed."""

    model = WebhookEndpoint
    resource_type = "webhook_endpoint"
    archivable = False

    def get_exception_handler(self) -> Callable[[Exception, dict[str, Any]], Response]:
        return refusal_handler

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, idempotency.IdempotentReplay) and isinstance(exc.response.data, dict):
            exc.response.data = self.unsealed(exc.response.data)
        return super().handle_exception(exc)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        claim = getattr(self, "idempotency_claim", None)
        self.idempotency_claim = None  # recorded here instead, with the secret sealed
        response = super().finalize_response(request, response, *args, **kwargs)
        if claim is not None and isinstance(response, Response):
            idempotency.record(claim, Response(self.sealed(response.data), status=response.status_code))
        return response

    def replay_context(self) -> str:
        return f"webhook-idempotent-replay:{self.principal.workspace_id}"

    def sealed(self, body: Any) -> Any:
        if not isinstance(body, dict) or "signing_secret" not in body:
            return body
        secret = body["signing_secret"]
        rest = {key: value for key, value in body.items() if key != "signing_secret"}
        return {**rest, SEALED_SECRET_KEY: seal(secret, context=self.replay_context())}

    def unsealed(self, body: dict[str, Any]) -> dict[str, Any]:
        if SEALED_SECRET_KEY not in body:
            return body
        rest = {key: value for key, value in body.items() if key != SEALED_SECRET_KEY}
        return {**rest, "signing_secret": unseal(body[SEALED_SECRET_KEY], context=self.replay_context())}


class WebhookEndpointViewSet(DeleteMixin, WebhookViewSet):
    """`/v1/webhooks[/{id}[/regenerate_signing_secret]]`: the workspace's webhook endpoints."""

    serializer_class = WebhookEndpointSerializer

    @extend_schema(
        parameters=PAGE_PARAMETERS, responses=page_response("WebhookEndpointList", WebhookEndpointSerializer)
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        endpoints = selectors.webhook_endpoints(workspace_id=self.principal.workspace_id)
        return paged(request, endpoints, self.render)

    @extend_schema(request=WebhookEndpointCreateSerializer, responses=NewWebhookEndpointSerializer)
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        values = validated(WebhookEndpointCreateSerializer, request.data)
        created = services.webhook_endpoint_create(workspace=self.principal.workspace, values=values)
        return Response(NewWebhookEndpointSerializer.render(created.endpoint, signing_secret=created.signing_secret))

    @extend_schema(responses=WebhookEndpointSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.get_object()))

    @extend_schema(request=WebhookEndpointUpdateSerializer, responses=WebhookEndpointSerializer)
    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        endpoint = self.get_object()
        values = validated(WebhookEndpointUpdateSerializer, request.data, partial=True)
        return Response(self.render(services.webhook_endpoint_update(endpoint=endpoint, values=values)))

    @extend_schema(responses=deleted_response("webhook_endpoint"))
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().destroy(request, *args, **kwargs)

    def perform_delete(self, instance: Any) -> None:
        services.webhook_endpoint_delete(endpoint=instance)

    @extend_schema(request=None, responses=SigningSecretSerializer)
    def regenerate_signing_secret(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        secret = services.webhook_endpoint_regenerate_signing_secret(endpoint=self.get_object())
        return Response(SigningSecretSerializer.render(secret))


class WebhookDeliveryViewSet(WebhookViewSet):
    """`/v1/webhooks/{id}/deliveries[/{delivery_id}[/redeliver]]`."""

    operation_name = "webhook_delivery"
    serializer_class = WebhookDeliverySerializer

    def delivery(self) -> WebhookDelivery:
        found = selectors.endpoint_delivery(endpoint=self.get_object(), delivery_id=self.kwargs["delivery_id"])
        if found is None:
            raise not_found(f"Webhook delivery {self.kwargs['delivery_id']} not found.")
        return found

    @extend_schema(
        parameters=[*PAGE_PARAMETERS, STATUS_PARAMETER],
        responses=page_response("WebhookDeliveryList", WebhookDeliverySerializer),
    )
    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        endpoint = self.get_object()
        status = request.query_params.get("status") or None
        if status is not None and status not in WebhookDelivery.Status.values:
            raise invalid_request(f"status: must be one of {', '.join(WebhookDelivery.Status.values)}.")
        deliveries = selectors.endpoint_deliveries(endpoint=endpoint, status=status)
        cursors = selectors.endpoint_deliveries(endpoint=endpoint)
        return paged(request, deliveries, self.render, cursors=cursors)

    @extend_schema(responses=WebhookDeliveryDetailSerializer)
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(WebhookDeliveryDetailSerializer.render(self.delivery()))

    @extend_schema(request=None, responses=WebhookDeliveryDetailSerializer)
    def redeliver(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        delivery = self.delivery()
        services.webhook_delivery_redeliver(delivery=delivery)
        return Response(WebhookDeliveryDetailSerializer.render(self.delivery()))
