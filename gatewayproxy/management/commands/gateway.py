"""`python manage.py gateway import FILE` replaces the database-backed gateway config with a YAML file's
(validated first; a bad file changes nothing); `gateway export` prints the stored config as YAML; `gateway seed
FILE --listen A --admin-listen A` imports FILE only when nothing was ever stored, then moves the stored
listeners to the given addresses (what `manage.py up` runs before a database-backed gateway)."""

from __future__ import annotations

import os
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gatewayproxy.cli import add_listener_arguments, listener_overrides
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
        seeding = actions.add_parser("seed", help="import FILE when the store is empty; set the listeners")
        seeding.add_argument("file", help="path of the gateway YAML config imported into an empty store")
        add_listener_arguments(seeding)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self.stdout.write(yaml.safe_dump(selectors.stored_document(), sort_keys=False))
            return
        path = os.path.abspath(options["file"])
        if options["action"] == "seed":
            self.seed(path, listener_overrides(options))
            return
        try:
            loaded = load_config_file(path)
            stored = services.config_import(document=normalized(loaded), source=path)
        except ConfigError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"imported {path}: config version {stored.version}")

    def seed(self, path: str, server: dict[str, str]) -> None:
        """Import `path` into an empty store, then set the stored listeners to `server`'s."""
        try:
            stored = services.config_seed(path=path, server=server)
        except ConfigError as error:
            raise CommandError(str(error)) from None
        version = selectors.config_version()
        self.stdout.write(f"stored config version {version}" + (" (unchanged)" if stored is None else ""))
