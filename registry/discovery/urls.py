"""URL patterns of discovery and health."""

from django.urls import path

from registry.discovery import views

urlpatterns = [
    path("healthz", views.HealthzView.as_view(), name="healthz"),
    path("readyz", views.ReadyzView.as_view(), name="readyz"),
    path("api", views.ApiVersionsView.as_view(), name="api-versions"),
    path("api/v1", views.CoreResourcesView.as_view(), name="api-core-resources"),
    path("apis", views.ApiGroupsView.as_view(), name="api-groups"),
    path("apis/<str:group>/v1", views.ApiGroupView.as_view(), name="api-group"),
]
