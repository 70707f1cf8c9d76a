"""URL patterns of /v1/sessions (the event stream is routed to its consumer in settings/asgi.py)."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.sessions.views import SessionEventViewSet, SessionResourceViewSet, SessionViewSet

urlpatterns = [
    *resource_urls("sessions", SessionViewSet, "sesn_id", name="session"),
    path("sessions/<sesn_id:id>/outcome", SessionViewSet.as_view({"get": "outcome"}), name="session-outcome"),
    path(
        "sessions/<sesn_id:id>/resources",
        SessionResourceViewSet.as_view({"get": "list", "post": "create"}),
        name="session-resources",
    ),
    path(
        "sessions/<sesn_id:id>/resources/<sesrsc_id:resource_id>",
        SessionResourceViewSet.as_view({"get": "retrieve", "post": "partial_update", "delete": "destroy"}),
        name="session-resource",
    ),
    path(
        "sessions/<sesn_id:id>/events",
        SessionEventViewSet.as_view({"get": "list", "post": "create"}),
        name="session-events",
    ),
]
