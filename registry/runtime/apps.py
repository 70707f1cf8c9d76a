"""App config for the session runtime (no models; it exists for the `runsessions` command)."""

from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """Registers `registry.runtime` so Django finds its management command."""

    name = "registry.runtime"
    label = "runtime"
