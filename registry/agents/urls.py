"""URL patterns of /v1/agents."""

from django.urls import path

from registry.agents.views import AgentVersionViewSet, AgentViewSet
from registry.core.routing import resource_urls

urlpatterns = [
    *resource_urls("agents", AgentViewSet, "agent_id", name="agent"),
    path("agents/<agent_id:id>/versions", AgentVersionViewSet.as_view({"get": "list"}), name="agent-versions"),
]
