"""App config for files."""

from django.apps import AppConfig


class FilesConfig(AppConfig):
    """The `files` app: uploads, their metadata and their bytes."""

    name = "registry.files"
    label = "files"
