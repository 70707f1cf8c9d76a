"""URL patterns of the deployments API."""

urlpatterns: list = []
