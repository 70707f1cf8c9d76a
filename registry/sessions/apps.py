"""App config for sessions (label `agent_sessions`: Django's own `sessions` label is taken)."""

from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "registry.sessions"
    label = "agent_sessions"
