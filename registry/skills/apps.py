"""App config for skills."""

from django.apps import AppConfig


class SkillsConfig(AppConfig):
    """The `skills` app: custom skills, their versions and their bundle files."""

    name = "registry.skills"
    label = "skills"
