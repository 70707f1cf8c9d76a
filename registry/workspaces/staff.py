"""Workspace staff: which workspaces a staff user of the admin may reach, and with which role
(viewer < operator < admin). Superusers reach every workspace as an admin. A viewer reads; an operator also
acts on sessions (archive, messages, interrupts, tool confirmations); an admin also adds, changes and deletes
within the workspace. The admin's pages ask `workspaces_permitting` (installed into registry.core.admin)."""

from __future__ import annotations

from typing import Any

from registry.workspaces.models import StaffMembership

Role = StaffMembership.Role
ROLE_ORDER: tuple[str, ...] = (Role.VIEWER.value, Role.OPERATOR.value, Role.ADMIN.value)

# The role each permission the admin's pages ask for needs (registry.core.admin names the permissions).
PERMISSION_ROLES = {
    "view": Role.VIEWER.value,
    "act": Role.OPERATOR.value,
    "add": Role.ADMIN.value,
    "change": Role.ADMIN.value,
    "delete": Role.ADMIN.value,
}


def _is_superuser(user: Any) -> bool:
    return bool(getattr(user, "is_active", False) and getattr(user, "is_superuser", False))


def _is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_active", False) and getattr(user, "is_staff", False))


def _roles_from(at_least: str) -> tuple[str, ...]:
    return ROLE_ORDER[ROLE_ORDER.index(at_least) :]


def workspaces_permitting(user: Any, permission: str) -> set[str] | None:
    """The ids of the workspaces where `user` holds the role `permission` needs; None means every one.
    A user who is not active staff holds none."""
    if _is_superuser(user):
        return None
    if not _is_staff(user):
        return set()
    memberships = StaffMembership.objects.filter(user=user, role__in=_roles_from(PERMISSION_ROLES[permission]))
    return set(memberships.values_list("workspace_id", flat=True))


def staff_workspace_ids(user: Any) -> set[str] | None:
    """The ids of the workspaces `user` is a staff member of; None means every workspace (a superuser)."""
    return workspaces_permitting(user, "view")


def staff_role(user: Any, workspace_id: str) -> str | None:
    """The role of `user` in the workspace: "admin" for a superuser, None without a membership."""
    if _is_superuser(user):
        return Role.ADMIN.value
    if not _is_staff(user):
        return None
    role = StaffMembership.objects.filter(user=user, workspace_id=workspace_id).values_list("role", flat=True).first()
    return None if role is None else str(role)


def role_at_least(role: str | None, at_least: str) -> bool:
    """Whether `role` (None: no membership) ranks at or above `at_least` in ROLE_ORDER."""
    return role is not None and role in _roles_from(at_least)


def has_role(user: Any, workspace_id: str, at_least: str) -> bool:
    """Whether `user` holds `at_least` or a higher role in the workspace (a superuser holds every role)."""
    return role_at_least(staff_role(user, workspace_id), at_least)
