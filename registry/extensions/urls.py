"""URL patterns of the extension groups (`/apis/<group>/v1/...`); each view checks the group is served."""

from django.urls import path

from registry.extensions.views import GuardrailTypeViewSet, GuardrailViewSet, HarnessViewSet, ModelPriceViewSet

GROUP = "apis/<str:group>/v1"

urlpatterns = [
    path(f"{GROUP}/guardrails", GuardrailViewSet.as_view({"get": "list", "post": "create"})),
    path(
        f"{GROUP}/guardrails/<str:id>",
        GuardrailViewSet.as_view({"get": "retrieve", "post": "partial_update", "delete": "destroy"}),
    ),
    path(f"{GROUP}/guardrailtypes", GuardrailTypeViewSet.as_view({"get": "list"})),
    path(f"{GROUP}/guardrailtypes/<str:name>", GuardrailTypeViewSet.as_view({"get": "retrieve"})),
    path(f"{GROUP}/modelprices", ModelPriceViewSet.as_view({"get": "list", "post": "create"})),
    path(f"{GROUP}/modelprices/<str:id>", ModelPriceViewSet.as_view({"delete": "destroy"})),
    path(f"{GROUP}/harnesses", HarnessViewSet.as_view({"get": "list"})),
]
