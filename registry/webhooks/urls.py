"""URL patterns of the webhooks API."""

urlpatterns: list = []
