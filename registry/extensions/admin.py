"""Django admin for organization policy and prices."""

from django.contrib import admin

from registry.extensions.models import Guardrail, ModelPrice


@admin.register(Guardrail)
class GuardrailAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "type", "action", "enabled", "updated_at")
    list_filter = ("type", "enabled")


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("provider", "model", "input_per_1m", "output_per_1m", "effective_from")
    list_filter = ("provider",)
