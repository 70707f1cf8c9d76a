"""URL patterns of /v1/sessions (the event streams, a session's and a thread's, are routed to their consumer in
settings/asgi.py)."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.sessions.thread_views import SessionThreadEventViewSet, SessionThreadViewSet
from registry.sessions.views import SessionEventViewSet, SessionResourceViewSet, SessionViewSet
from registry.sessions.work_views import WorkViewSet

WORK = "environments/<env_id:environment_id>/work"
THREAD = "sessions/<sesn_id:id>/threads/<sthr_id:thread_id>"

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
    path("sessions/<sesn_id:id>/threads", SessionThreadViewSet.as_view({"get": "list"}), name="session-threads"),
    path(THREAD, SessionThreadViewSet.as_view({"get": "retrieve"}), name="session-thread"),
    path(f"{THREAD}/archive", SessionThreadViewSet.as_view({"post": "archive"}), name="session-thread-archive"),
    path(f"{THREAD}/events", SessionThreadEventViewSet.as_view({"get": "list"}), name="session-thread-events"),
    # The work queue of a self-hosted environment (its own module: it reads sessions and environments).
    path(WORK, WorkViewSet.as_view({"get": "list"}), name="environment-work-list"),
    path(f"{WORK}/poll", WorkViewSet.as_view({"get": "poll"}), name="environment-work-poll"),
    path(f"{WORK}/stats", WorkViewSet.as_view({"get": "stats"}), name="environment-work-stats"),
    path(
        f"{WORK}/<work_id:id>",
        WorkViewSet.as_view({"get": "retrieve", "post": "partial_update"}),
        name="environment-work-detail",
    ),
    path(f"{WORK}/<work_id:id>/ack", WorkViewSet.as_view({"post": "ack"}), name="environment-work-ack"),
    path(
        f"{WORK}/<work_id:id>/heartbeat", WorkViewSet.as_view({"post": "heartbeat"}), name="environment-work-heartbeat"
    ),
    path(f"{WORK}/<work_id:id>/stop", WorkViewSet.as_view({"post": "stop"}), name="environment-work-stop"),
]
