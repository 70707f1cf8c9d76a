"""URL patterns of /v1/deployments (and its actions) and /v1/deployment_runs."""

from django.urls import path

from registry.core.routing import resource_urls
from registry.deployments.views import ACTIONS, DeploymentRunViewSet, DeploymentViewSet

urlpatterns = [
    *resource_urls("deployments", DeploymentViewSet, "depl_id", name="deployment"),
    *(
        path(
            f"deployments/<depl_id:id>/{action}",
            DeploymentViewSet.as_view({"post": action}),
            name=f"deployment-{action}",
        )
        for action in ACTIONS
    ),
    *resource_urls("deployment_runs", DeploymentRunViewSet, "drun_id", name="deployment-run"),
]
