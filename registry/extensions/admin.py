"""Django admin for organization policy and prices: organization-wide rows, so superusers only. Writes go
through the API's serializers and services, as an organization-admin key's would."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from registry.core.admin import ServiceWriteAdmin
from registry.core.views import WriteServices
from registry.extensions import services
from registry.extensions.models import Guardrail, ModelPrice
from registry.extensions.serializers import GuardrailWriteSerializer, ModelPriceWriteSerializer


@admin.register(Guardrail)
class GuardrailAdmin(ServiceWriteAdmin):
    workspace_path = None
    list_display = ("name", "type", "action", "enabled", "updated_at")
    list_filter = ("type", "enabled")
    write_serializer = GuardrailWriteSerializer
    write_services = WriteServices(services.guardrail_create, services.guardrail_update, "guardrail")

    def delete_model(self, request: HttpRequest, obj: Guardrail) -> None:
        services.guardrail_delete(guardrail=obj)


@admin.register(ModelPrice)
class ModelPriceAdmin(ServiceWriteAdmin):
    """Dated price rows: a new price is a new row (as in the API), so a row is added or deleted, never changed."""

    workspace_path = None
    list_display = ("provider", "model", "input_per_1m", "output_per_1m", "effective_from")
    list_filter = ("provider",)
    write_serializer = ModelPriceWriteSerializer

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def create_object(self, form: Any) -> Any:
        return services.model_price_create(values=form.api_values)

    def delete_model(self, request: HttpRequest, obj: ModelPrice) -> None:
        services.model_price_delete(price_id=str(obj.pk))
