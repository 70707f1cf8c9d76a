"""The tenancy base viewset every registry resource uses: workspace scoping, lists, archive, delete,
idempotency keys and error rendering are written here once; so are the writes of a resource family
(`WriteMixin`, `WriteServices`) and the actions that hand the object to a service (`object_action`)."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db import models
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from registry.core import idempotency
from registry.core.callers import Caller
from registry.core.errors import invalid_request, not_found
from registry.core.fields import validated
from registry.core.openapi import resource_schema
from registry.core.pagination import KeysetPagination
from registry.core.serialization import ConstantField, ResponseSerializer
from registry.core.services import resource_archive, resource_delete


def parse_bool(raw: str | None, name: str) -> bool:
    if raw in (None, ""):
        return False
    lowered = raw.lower()
    if lowered not in ("true", "false", "1", "0"):
        raise invalid_request(f"{name}: must be true or false.")
    return lowered in ("true", "1")


def object_action(service: Callable[..., Any], keyword: str) -> Callable[..., Response]:
    """A viewset action (a POST without a body) that hands the viewset's object to the app's `service` (as
    its argument `keyword`) and answers the object the service gives back."""

    # No docstring: an action's docstring would become its operation's description.
    @extend_schema(request=None)
    def act(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(service(**{keyword: self.get_object()})))

    return act


class WorkspaceViewSet(viewsets.GenericViewSet):  # type: ignore[type-arg]
    """Base for every workspace-owned resource.

    Subclasses set `model`, `resource_type` (for example "agent"), `serializer_class` (the response
    serializer, which describes and renders the object) and the write serializers, and implement
    `create`, `partial_update` through their app's services.
    """

    model: ClassVar[type[models.Model]]
    resource_type: ClassVar[str]
    serializer_class: type[ResponseSerializer]
    lookup_field = "id"
    lookup_url_kwarg = "id"
    pagination = KeysetPagination()
    archivable = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """`resource_type`, where a subclass does not set it: the `type` (a `ConstantField`) of the objects its
        `serializer_class` renders."""
        super().__init_subclass__(**kwargs)
        serializer_class = getattr(cls, "serializer_class", None)
        if not hasattr(cls, "resource_type") and serializer_class is not None:
            kind = serializer_class._declared_fields.get("type")
            if isinstance(kind, ConstantField):
                cls.resource_type = kind.value

    # -- request lifecycle: idempotency keys wrap every POST -------------------------------
    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self.idempotency_claim = None
        if request.method == "POST":
            self.idempotency_claim = idempotency.claim(request, self.principal.workspace_id)

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, idempotency.IdempotentReplay):
            return exc.response
        return super().handle_exception(exc)

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        response = super().finalize_response(request, response, *args, **kwargs)
        idempotency.release(request)
        claim = getattr(self, "idempotency_claim", None)
        if claim is not None and isinstance(response, Response):
            idempotency.record(claim, response)
        return response

    # -- tenancy ---------------------------------------------------------------------------
    @property
    def principal(self) -> Caller:
        user = self.request.user
        assert isinstance(user, Caller)
        return user

    def get_queryset(self) -> models.QuerySet[Any]:
        if getattr(self, "swagger_fake_view", False):  # OpenAPI generation has no caller
            return self.model._default_manager.none()
        return self.model._default_manager.filter(workspace_id=self.principal.workspace_id)

    def get_object(self) -> Any:
        instance = self.get_queryset().filter(pk=self.kwargs[self.lookup_url_kwarg]).first()
        if instance is None:
            raise not_found(f"{self.resource_type.replace('_', ' ').capitalize()} {self.kwargs['id']} not found.")
        return instance

    # -- lists -----------------------------------------------------------------------------
    def list_queryset(self) -> models.QuerySet[Any]:
        queryset = self.filter_queryset(self.get_queryset())
        if self.archivable and not parse_bool(self.request.query_params.get("include_archived"), "include_archived"):
            queryset = queryset.filter(archived_at__isnull=True)
        return queryset

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        rows, links = self.pagination.paginate(self.list_queryset(), request)
        return KeysetPagination.response(self.render_many(rows), links)

    def render_many(self, rows: Sequence[Any]) -> builtins.list[Any]:
        return [self.render(row) for row in rows]

    def render(self, instance: Any) -> Any:
        """The API object of `instance`, rendered by the viewset's response serializer."""
        return self.serializer_class.render(instance)

    # -- standard actions ------------------------------------------------------------------
    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.get_object()))

    archive = object_action(resource_archive, "instance")


@dataclass(frozen=True)
class WriteServices:
    """The app's services behind a family's writes: `create(workspace=..., values=...)`, and `update`, which
    takes the object as its argument `keyword` and the `values`."""

    create: Callable[..., Any]
    update: Callable[..., Any]
    keyword: str


class WriteMixin:
    """`POST /v1/<family>` and `POST /v1/<family>/{id}`: validate with `write_serializer` (partial for
    updates, or `update_serializer` when the family has one), then call the app's service."""

    # (The docstring above is the description of the operations of the viewsets without their own.)
    # The services are the viewset's `write_services`: a create gets the caller's workspace and the values,
    # an update the object and the values. A viewset that names its `write_serializer` gets the OpenAPI
    # description of a standard resource family (`resource_schema`) from its attributes.

    write_serializer: ClassVar[type[serializers.Serializer[Any]]]
    update_serializer: ClassVar[type[serializers.Serializer[Any]] | None] = None
    write_services: ClassVar[WriteServices]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "write_serializer" in cls.__dict__:
            view: Any = cls
            resource_schema(
                view.resource_type,
                read=view.serializer_class,
                write=cls.write_serializer,
                update=cls.update_serializer,
                deletable=issubclass(cls, DeleteMixin),
                with_prev_page=view.pagination.with_prev_page,
            )(cls)

    def create_instance(self: Any, values: dict[str, Any]) -> Any:
        return self.write_services.create(workspace=self.principal.workspace, values=values)

    def update_instance(self, instance: Any, values: dict[str, Any]) -> Any:
        return self.write_services.update(**{self.write_services.keyword: instance}, values=values)

    def validated(self, data: Any, *, partial: bool) -> dict[str, Any]:
        serializer_class = (self.update_serializer or self.write_serializer) if partial else self.write_serializer
        return validated(serializer_class, data, partial=partial)

    def create(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.render(self.create_instance(self.validated(request.data, partial=False))))

    def partial_update(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        return Response(self.render(self.update_instance(instance, self.validated(request.data, partial=True))))


class DeleteMixin:
    """`DELETE /v1/<family>/{id}`: answers `{"id", "type": "<resource>_deleted"}`."""

    def destroy(self: Any, request: Request, *args: Any, **kwargs: Any) -> Response:
        instance = self.get_object()
        identifier = instance.pk
        self.perform_delete(instance)
        return Response({"id": identifier, "type": f"{self.resource_type}_deleted"})

    def perform_delete(self, instance: Any) -> None:
        resource_delete(instance=instance)
