"""App config for git credentials."""

from django.apps import AppConfig


class GitCredsConfig(AppConfig):
    name = "registry.gitcreds"
    label = "gitcreds"
