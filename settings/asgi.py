"""ASGI entry point (daphne): the event streams of a session and of its threads and the admin's live feed of a
session as Channels consumers; the rest of the API, whose views are sync, through Django's WSGI handler in one
worker-thread hop (registry.core.asgi)."""

import gc
import importlib
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
get_asgi_application()  # sets Django up before the consumers and the WSGI adapter are imported

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from registry.core.asgi import WsgiApplication, skip_twisted_form_parsing  # noqa: E402
from registry.sessions.admin_stream import FEED_ROUTE, AdminSessionFeed  # noqa: E402
from registry.sessions.consumers import SessionStreamConsumer, ThreadStreamConsumer  # noqa: E402

django_application = WsgiApplication()
skip_twisted_form_parsing()

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                path("v1/sessions/<sesn_id:id>/events/stream", SessionStreamConsumer.as_asgi()),
                path("v1/sessions/<sesn_id:id>/threads/<sthr_id:thread_id>/stream", ThreadStreamConsumer.as_asgi()),
                re_path(FEED_ROUTE, AuthMiddlewareStack(AdminSessionFeed.as_asgi())),
                re_path(r"", django_application),  # type: ignore[arg-type]
            ]
        )
    }
)

if settings.REGISTRY_RUNTIME_EMBEDDED:
    from registry.runtime.embedded import start_embedded_runtime

    start_embedded_runtime()

# What is loaded now (Django, DRF, the URLconf and its views) lives as long as the process: out of the
# collector's sight, a full collection walks only what requests allocate. Walking it all paused the
# server 70-80 ms every 1.3 s under 20 appending clients.
importlib.import_module(settings.ROOT_URLCONF)  # the views, now rather than on the first request
gc.freeze()
