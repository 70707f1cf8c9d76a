"""The caller of an API operation as the apps see it, and the permissions that ask for one.

The workspaces app authenticates a request (`registry.workspaces.authentication`) and puts its `Principal`,
a `Caller`, on `request.user`; the apps below and above it read only this interface.
"""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request


class Caller:
    """The caller: one workspace, and how it proved it."""

    is_authenticated = True

    workspace: Any  # a `workspaces.Workspace` (core sits below that app)
    credential_kind: str  # "api_key" or "oidc"
    subject: str
    is_org_admin: bool

    @property
    def workspace_id(self) -> str:
        return str(self.workspace.pk)


class IsOrganizationAdmin(permissions.BasePermission):
    """Organization-wide writes (policy, prices) need an API key issued with `--org-admin`."""

    message = "This operation needs an organization-admin API key."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Caller) and request.user.is_org_admin


class IsWorkspaceMember(permissions.BasePermission):
    """Every registry operation needs a principal; its workspace bounds what it sees."""

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Caller)
