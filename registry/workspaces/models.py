"""Workspace, ApiKey (SHA-256 digest only), OidcMembership (an OIDC subject mapped to one workspace) and
StaffMembership (a staff user's role in a workspace of the admin)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from registry.core.ids import public_id_field


class Workspace(models.Model):
    id = public_id_field("wsp")
    name = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"


class ApiKey(models.Model):
    """A workspace API key. Only its SHA-256 digest is stored; the plaintext is shown once."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=255, blank=True, default="")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    display_prefix = models.CharField(max_length=16, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    is_org_admin = models.BooleanField(default=False, help_text="May write organization policy and prices.")

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.display_prefix}… ({self.workspace_id})"


class OidcMembership(models.Model):
    """Maps an OIDC subject to exactly one workspace."""

    subject = models.CharField(max_length=255, unique=True)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "OIDC membership"

    def __str__(self) -> str:
        return f"{self.subject} → {self.workspace_id}"


class StaffMembership(models.Model):
    """A staff user's role in one workspace of the admin: a viewer reads, an operator also acts on sessions
    and the like, an admin also changes and deletes. Superusers need none: they see every workspace."""

    class Role(models.TextChoices):
        VIEWER = "viewer"
        OPERATOR = "operator"
        ADMIN = "admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="staff_memberships")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="staff_memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "staff membership"
        constraints = [models.UniqueConstraint(fields=["user", "workspace"], name="staff_membership_unique")]

    def __str__(self) -> str:
        return f"{self.user} → {self.workspace_id} ({self.role})"


class EnvironmentKey(models.Model):
    """A credential scoped to one `self_hosted` environment of a workspace, sent as `Authorization: Bearer`.

    Only its SHA-256 digest is stored; the plaintext is shown once. The environment is named by id (the
    environments app sits above this one); whoever mints a key checks that it is a self_hosted environment
    of `workspace`."""

    id = public_id_field("envkey")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="environment_keys")
    environment_id = models.CharField(max_length=64, db_index=True)
    name = models.CharField(max_length=255, blank=True, default="")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    display_prefix = models.CharField(max_length=16, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "environment key"

    def __str__(self) -> str:
        return f"{self.display_prefix}… ({self.environment_id})"


class WorkSecret(models.Model):
    """The sessions token of one work item's `secret`: a credential for that item's session only, valid
    until the item stops. Only its SHA-256 digest is stored."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="work_secrets")
    environment_id = models.CharField(max_length=64)
    session_id = models.CharField(max_length=64)
    work_id = models.CharField(max_length=64, db_index=True)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "work secret"

    def __str__(self) -> str:
        return f"work secret of {self.work_id} ({self.session_id})"
