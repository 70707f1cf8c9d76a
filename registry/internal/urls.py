"""URL patterns of the internal endpoints (included only when REGISTRY_INTERNAL_API is on)."""

from django.urls import path

from registry.internal import views

urlpatterns = [
    path("guardrails/effective", views.EffectiveGuardrailsView.as_view(), name="internal-guardrails"),
    path(
        "workspaces/<wsp_id:workspace>/sessions/<sesn_id:session>/guardrail-state",
        views.GuardrailStateView.as_view(),
        name="internal-guardrail-state",
    ),
    path("usage", views.UsageIngestView.as_view(), name="internal-usage"),
]
