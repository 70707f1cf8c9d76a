"""The caller of an API operation as the apps see it, and the permissions that ask for one.

The workspaces app authenticates a request (`registry.workspaces.authentication`) and puts its `Principal`,
a `Caller`, on `request.user`; the apps below and above it read only this interface.

Scoped callers: an environment key (`credential_kind == "environment_key"`, bound to one `environment_id`)
and a work item's sessions token (`"work_secret"`, bound to one `session_id` and `work_id`). The default
permission (`IsWorkspaceMember`, settings REST_FRAMEWORK) refuses them on every view; a view opts in by
naming the kinds it accepts in `accepts_scoped_credentials`, and then checks each object it touches with
`scoped_access`. A new route is therefore never open to a scoped credential by accident.
"""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

ENVIRONMENT_KEY = "environment_key"
WORK_SECRET = "work_secret"
SCOPED_KINDS = frozenset({ENVIRONMENT_KEY, WORK_SECRET})


class Caller:
    """The caller: one workspace, and how it proved it."""

    is_authenticated = True

    workspace: Any  # a `workspaces.Workspace` (core sits below that app)
    credential_kind: str  # "api_key", "oidc", "environment_key" or "work_secret"
    subject: str
    is_org_admin: bool
    environment_id: str | None = None  # set for "environment_key" and "work_secret"
    session_id: str | None = None  # set for "work_secret"
    work_id: str | None = None  # set for "work_secret"

    @property
    def workspace_id(self) -> str:
        return str(self.workspace.pk)

    @property
    def is_scoped(self) -> bool:
        """An environment key or a work secret: refused everywhere but the views that opt in."""
        return self.credential_kind in SCOPED_KINDS


def scoped_access(
    caller: Any, *, environment_id: str | None = None, session_id: str | None = None, work_id: str | None = None
) -> bool:
    """May `caller` act on the named environment / session / work item?

    A workspace credential (API key, OIDC) may: its workspace already bounds what it sees. An environment
    key may act on its own environment's work and sessions: pass that object's `environment_id` (for a
    session, the session's environment). A work secret may act on its own session and work item only: pass
    `session_id` and/or `work_id` (an `environment_id`, when given, must be its own too). A scoped caller
    that is asked about nothing is refused.
    """
    if not isinstance(caller, Caller):
        return False
    if not caller.is_scoped:
        return True
    if caller.credential_kind == ENVIRONMENT_KEY:
        return environment_id is not None and environment_id == caller.environment_id
    if session_id is None and work_id is None:
        return False
    return (
        (session_id is None or session_id == caller.session_id)
        and (work_id is None or work_id == caller.work_id)
        and (environment_id is None or environment_id == caller.environment_id)
    )


class IsOrganizationAdmin(permissions.BasePermission):
    """Organization-wide writes (policy, prices) need an API key issued with `--org-admin`."""

    message = "This operation needs an organization-admin API key."

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Caller) and request.user.is_org_admin


class IsWorkspaceMember(permissions.BasePermission):
    """Every registry operation needs a principal; its workspace bounds what it sees.

    A scoped principal (environment key, work secret) passes only on a view whose
    `accepts_scoped_credentials` names its kind and, when the view sets `scoped_actions`, only for those
    actions of a viewset; such a view checks each object it touches with `scoped_access`.
    """

    message = "This credential is not allowed to perform this operation."

    def has_permission(self, request: Request, view: Any) -> bool:
        caller = request.user
        if not isinstance(caller, Caller):
            return False
        if caller.is_scoped:
            return accepts_scoped(view, caller)
        return True


def accepts_scoped(view: Any, caller: Caller) -> bool:
    """Has `view` opted in to the scoped `caller`'s kind (and, with `scoped_actions`, to this action)?"""
    if caller.credential_kind not in getattr(view, "accepts_scoped_credentials", ()):
        return False
    actions = getattr(view, "scoped_actions", None)
    return actions is None or getattr(view, "action", None) in actions
