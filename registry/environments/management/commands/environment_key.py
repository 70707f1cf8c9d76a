"""`manage.py environment_key mint|list|revoke`: keys of self_hosted environments (issue 26), for staff.

A key is printed once, when minted; only its digest is stored. A revoked key is refused on its next use.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rest_framework import serializers

from registry.environments import services
from registry.environments.models import Environment
from registry.workspaces import scoped_credentials
from registry.workspaces.models import EnvironmentKey


def describe(key: EnvironmentKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "environment_id": key.environment_id,
        "workspace_id": key.workspace_id,
        "name": key.name,
        "display_prefix": key.display_prefix,
        "created_at": key.created_at.isoformat(),
        "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


class Command(BaseCommand):
    help = "Mint, list and revoke the keys of self_hosted environments."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        mint = actions.add_parser("mint", help="Mint a key for a self_hosted environment (printed once).")
        mint.add_argument("environment_id")
        mint.add_argument("--name", default="")
        mint.add_argument("--json", action="store_true", help="Print one JSON object.")
        listing = actions.add_parser("list", help="List keys (never their plaintext).")
        listing.add_argument("--environment", dest="environment_id", default=None)
        listing.add_argument("--workspace", dest="workspace_id", default=None)
        listing.add_argument("--include-revoked", action="store_true")
        listing.add_argument("--json", action="store_true", help="Print one JSON object.")
        revoke = actions.add_parser("revoke", help="Revoke a key: it is refused on its next use.")
        revoke.add_argument("key_id")
        revoke.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "mint":
            environment = Environment.objects.select_related("workspace").filter(pk=options["environment_id"]).first()
            if environment is None:
                raise CommandError(f"no environment {options['environment_id']}")
            try:
                issued = services.environment_key_mint(environment=environment, name=options["name"])
            except serializers.ValidationError as error:
                raise CommandError(str(error.detail)) from error
            key = issued.environment_key
            self.emit(
                options,
                {**describe(key), "key": issued.plaintext},
                f"Environment key {key.id} for {key.environment_id}\nKey (shown once): {issued.plaintext}",
            )
        elif action == "list":
            keys = EnvironmentKey.objects.order_by("created_at")
            if options["environment_id"]:
                keys = keys.filter(environment_id=options["environment_id"])
            if options["workspace_id"]:
                keys = keys.filter(workspace_id=options["workspace_id"])
            if not options["include_revoked"]:
                keys = keys.filter(revoked_at__isnull=True)
            rows = [describe(key) for key in keys]
            lines = [
                f"{row['id']}  {row['display_prefix']}…  {row['environment_id']}  {row['name'] or '-'}"
                f"  {'revoked ' + row['revoked_at'] if row['revoked_at'] else 'active'}"
                for row in rows
            ]
            self.emit(options, {"data": rows}, "\n".join(lines) or "no environment keys")
        else:
            found = EnvironmentKey.objects.filter(pk=options["key_id"]).first()
            if found is None:
                raise CommandError(f"no environment key {options['key_id']}")
            key = scoped_credentials.environment_key_revoke(environment_key=found)
            self.emit(options, describe(key), f"Revoked {key.id} at {key.revoked_at}")

    def emit(self, options: dict[str, Any], document: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(document) if options["json"] else text)
