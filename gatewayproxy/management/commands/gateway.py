"""`python manage.py gateway import FILE` replaces the database-backed gateway config with a YAML file's
(validated first; a bad file changes nothing); `gateway export` prints the stored config as YAML."""

from __future__ import annotations

import os
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gatewayproxy.config.loader import ConfigError, load_config_file
from gatewayproxy.store import selectors, services
from gatewayproxy.store.document import normalized


class Command(BaseCommand):
    """Moves gateway configuration between YAML files and the database."""

    help = "Import a gateway YAML config into the database, or export the stored one."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        importing = actions.add_parser("import", help="replace the stored config with FILE's")
        importing.add_argument("file", help="path of the gateway YAML config")
        actions.add_parser("export", help="print the stored config as YAML")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self.stdout.write(yaml.safe_dump(selectors.stored_document(), sort_keys=False))
            return
        path = os.path.abspath(options["file"])
        try:
            loaded = load_config_file(path)
            stored = services.config_import(document=normalized(loaded), source=path)
        except ConfigError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"imported {path}: config version {stored.version}")
