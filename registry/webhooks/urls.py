"""URL patterns of /v1/webhooks, its regeneration action and its deliveries. Path ids match their prefix
(`whep_`, `whdl_`) or the path is a 404, as the converters of `registry.core.ids` do for the other families."""

from django.urls import re_path

from registry.webhooks.views import WebhookDeliveryViewSet, WebhookEndpointViewSet

ENDPOINT = r"^webhooks/(?P<id>whep_[A-Za-z0-9_-]+)"
DELIVERY = rf"{ENDPOINT}/deliveries/(?P<delivery_id>whdl_[A-Za-z0-9_-]+)"

urlpatterns = [
    re_path(r"^webhooks$", WebhookEndpointViewSet.as_view({"get": "list", "post": "create"}), name="webhook-list"),
    re_path(
        rf"{ENDPOINT}$",
        WebhookEndpointViewSet.as_view({"get": "retrieve", "post": "partial_update", "delete": "destroy"}),
        name="webhook-detail",
    ),
    re_path(
        rf"{ENDPOINT}/regenerate_signing_secret$",
        WebhookEndpointViewSet.as_view({"post": "regenerate_signing_secret"}),
        name="webhook-regenerate-signing-secret",
    ),
    re_path(rf"{ENDPOINT}/deliveries$", WebhookDeliveryViewSet.as_view({"get": "list"}), name="webhook-deliveries"),
    re_path(rf"{DELIVERY}$", WebhookDeliveryViewSet.as_view({"get": "retrieve"}), name="webhook-delivery"),
    re_path(rf"{DELIVERY}/redeliver$", WebhookDeliveryViewSet.as_view({"post": "redeliver"}), name="webhook-redeliver"),
]
