"""Root URL configuration: discovery and health, metrics, `/v1/...` resources, OpenAPI, Django admin.

Anything else (the old `/v1/registry/...` form included) is a 404 in the error envelope; errors under the admin
are HTML pages in its look instead (registry.core.error_pages).
"""

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from registry.core.error_pages import error_response
from registry.core.errors import ErrorType
from registry.core.observability import metrics_view
from registry.internal.views import JwksView

# Django tries patterns in order and every prefix here is distinct, so the busiest come first: session
# events are most of the traffic (each pattern tried before a match costs a regular expression).
urlpatterns = [
    path("v1/", include("registry.sessions.urls")),
    path("", include("registry.discovery.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("v1/", include("registry.agents.urls")),
    path("v1/", include("registry.environments.urls")),
    path("v1/", include("registry.triggers.urls")),
    path("v1/", include("registry.memory.urls")),
    path("v1/", include("registry.vaults.urls")),
    path("v1/", include("registry.gitcreds.urls")),
    path("v1/", include("registry.files.urls")),
    path("v1/", include("registry.skills.urls")),
    path("v1/", include("registry.webhooks.urls")),
    path("v1/", include("registry.deployments.urls")),
    path("", include("registry.environments.keys")),  # the runtime group's environment keys (issue 26)
    path("", include("registry.extensions.urls")),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path(".well-known/jwks.json", JwksView.as_view(), name="jwks"),
    path("admin/", admin.site.urls),
]

if settings.REGISTRY_INTERNAL_API:
    urlpatterns.append(path("internal/v1/", include("registry.internal.urls")))


def not_found_handler(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, ErrorType.NOT_FOUND, f"No route for {request.method} {request.path}.")


def server_error_handler(request: HttpRequest) -> HttpResponse:
    return error_response(request, ErrorType.API, "Internal server error.")


def bad_request_handler(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, ErrorType.INVALID_REQUEST, "Bad request.")


def permission_denied_handler(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, ErrorType.PERMISSION, "Permission denied.")


handler404 = not_found_handler
handler500 = server_error_handler
handler400 = bad_request_handler
handler403 = permission_denied_handler
