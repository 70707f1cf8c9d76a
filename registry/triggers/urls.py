"""URL patterns of /v1/triggers and its actions."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.triggers.views import ACTIONS, TriggerViewSet

urlpatterns = [
    *resource_urls("triggers", TriggerViewSet, "trg_id", name="trigger"),
    *(
        path(f"triggers/<trg_id:id>/{action}", TriggerViewSet.as_view({"post": action}), name=f"trigger-{action}")
        for action in ACTIONS
    ),
]
