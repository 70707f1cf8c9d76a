"""ASGI entry point (daphne): the session event stream as a Channels consumer, Django for the rest."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from registry.sessions.consumers import SessionStreamConsumer  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": URLRouter(
            [
                path("v1/sessions/<sesn_id:id>/events/stream", SessionStreamConsumer.as_asgi()),
                re_path(r"", django_application),  # type: ignore[arg-type]
            ]
        )
    }
)
