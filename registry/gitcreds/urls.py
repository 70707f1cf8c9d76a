"""URL patterns of /v1/git-creds."""

from registry.core.routing import resource_urls
from registry.gitcreds.views import GitCredentialViewSet

urlpatterns = resource_urls("git-creds", GitCredentialViewSet, "gitcred_id", name="git-credential")
