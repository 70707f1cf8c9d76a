"""App config for agents."""

from django.apps import AppConfig


class AgentsConfig(AppConfig):
    name = "registry.agents"
    label = "agents"
