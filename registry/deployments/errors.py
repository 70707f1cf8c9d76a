"""The typed errors of a deployment run and the reasons a deployment is paused, as the reference client
reads them (`*RunErrorObject`, `*DeploymentPausedReason*`), and `RunFailure`, the exception that carries one."""

from __future__ import annotations

import enum
from typing import Any

from registry.core.errors import ApiError, invalid_request


class RunErrorType(enum.StrEnum):
    """Why a fire created no session. Every type but the two `session_*` ones names a cause that stays
    until someone fixes it, so the fire also pauses the deployment with that type as its reason."""

    AGENT_ARCHIVED = "agent_archived_error"
    ENVIRONMENT_ARCHIVED = "environment_archived_error"
    ENVIRONMENT_NOT_FOUND = "environment_not_found_error"
    VAULT_ARCHIVED = "vault_archived_error"
    VAULT_NOT_FOUND = "vault_not_found_error"
    FILE_NOT_FOUND = "file_not_found_error"
    MEMORY_STORE_ARCHIVED = "memory_store_archived_error"
    SKILL_NOT_FOUND = "skill_not_found_error"
    SESSION_RESOURCE_NOT_FOUND = "session_resource_not_found_error"
    MCP_EGRESS_BLOCKED = "mcp_egress_blocked_error"
    SELF_HOSTED_RESOURCES_UNSUPPORTED = "self_hosted_resources_unsupported_error"
    # Workspaces are never archived and organisations never disabled here: these two have no cause yet.
    WORKSPACE_ARCHIVED = "workspace_archived_error"
    ORGANIZATION_DISABLED = "organization_disabled_error"
    UNKNOWN = "unknown_error"
    # The two that do not pause: a rate limit passes, and a rejection no check above foresaw is the
    # request's, not a vanished dependency's (the reference client's paused reasons omit both).
    SESSION_RATE_LIMITED = "session_rate_limited_error"
    SESSION_CREATION_REJECTED = "session_creation_rejected_error"


NON_PAUSING = frozenset({RunErrorType.SESSION_RATE_LIMITED, RunErrorType.SESSION_CREATION_REJECTED})

MANUAL_PAUSE: dict[str, Any] = {"type": "manual"}


class RunFailure(Exception):
    """A fire's session could not be created: the typed error the run records. `field` names the part
    of the deployment that failed, for the 400 the same check gives when creating or updating one."""

    def __init__(self, error_type: RunErrorType, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message
        self.field = field

    @property
    def pauses(self) -> bool:
        return self.error_type not in NON_PAUSING

    def run_error(self) -> dict[str, str]:
        """The run's `error` object."""
        return {"type": str(self.error_type), "message": self.message}

    def paused_reason(self) -> dict[str, Any]:
        """The deployment's `paused_reason` once this failure paused it."""
        return {"type": "error", "error": {"type": str(self.error_type)}}

    def as_invalid_request(self) -> ApiError:
        """The 400 of a create or update whose deployment would fail this way at its first fire."""
        reason = str(self.error_type).removesuffix("_error")
        return invalid_request(f"{self.field}: {reason}: {self.message}" if self.field else f"{reason}: {self.message}")
