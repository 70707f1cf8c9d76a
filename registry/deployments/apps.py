"""App config for deployments: it also registers the path converters of its ids (`depl_id`, `drun_id`)."""

from django.apps import AppConfig
from django.urls import register_converter

ID_PREFIXES = ("depl", "drun")


class _PrefixedIdConverter:
    """A path segment matches only ids of its own prefix; anything else is a 404."""

    regex = ""

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class DeploymentsConfig(AppConfig):
    name = "registry.deployments"
    label = "deployments"

    def ready(self) -> None:
        for prefix in ID_PREFIXES:
            regex = f"{prefix}_[A-Za-z0-9_-]+"
            register_converter(
                type(f"{prefix.title()}IdConverter", (_PrefixedIdConverter,), {"regex": regex}), f"{prefix}_id"
            )
