"""URL patterns of /v1/environments."""

from registry.core.routing import resource_urls
from registry.environments.views import EnvironmentViewSet

urlpatterns = resource_urls("environments", EnvironmentViewSet, "env_id", name="environment")
