"""`manage.py workspace create|key|member`: workspace administration for people and scripts."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry.workspaces import services
from registry.workspaces.models import Workspace


class Command(BaseCommand):
    help = "Create workspaces, issue API keys and map OIDC subjects to workspaces."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="Create a workspace and its first API key.")
        create.add_argument("name")
        create.add_argument("--json", action="store_true", help="Print one JSON object.")
        key = actions.add_parser("key", help="Issue a new API key for a workspace.")
        key.add_argument("workspace_id")
        key.add_argument("--name", default="")
        key.add_argument("--org-admin", action="store_true", help="The key may write organization policy and prices.")
        key.add_argument("--json", action="store_true", help="Print one JSON object.")
        member = actions.add_parser("member", help="Map an OIDC subject to a workspace.")
        member.add_argument("workspace_id")
        member.add_argument("--subject", required=True)
        member.add_argument("--json", action="store_true", help="Print one JSON object.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            workspace, issued = services.workspace_create(name=options["name"])
            self.emit(
                options,
                {"workspace": {"id": workspace.id, "name": workspace.name}, "api_key": issued.plaintext},
                f"Workspace {workspace.id} ({workspace.name})\nAPI key (shown once): {issued.plaintext}",
            )
        elif action == "key":
            issued = services.api_key_issue(
                workspace=self.workspace(options["workspace_id"]), name=options["name"], org_admin=options["org_admin"]
            )
            self.emit(options, {"api_key": issued.plaintext}, f"API key (shown once): {issued.plaintext}")
        else:
            membership = services.membership_set(
                workspace=self.workspace(options["workspace_id"]), subject=options["subject"]
            )
            self.emit(
                options,
                {"subject": membership.subject, "workspace_id": membership.workspace_id},
                f"Subject {membership.subject} now belongs to {membership.workspace_id}",
            )

    @staticmethod
    def workspace(workspace_id: str) -> Workspace:
        workspace = Workspace.objects.filter(pk=workspace_id).first()
        if workspace is None:
            raise CommandError(f"no workspace {workspace_id}")
        return workspace

    def emit(self, options: dict[str, Any], document: dict[str, Any], text: str) -> None:
        self.stdout.write(json.dumps(document) if options["json"] else text)
