"""The webhook event types: the reference client's `BetaWebhook*EventData` types this registry emits.

Organisation-level types (`external_key.*`, `user_profile.*`) have no cause in a workspace and are
refused in an endpoint's `enabled_events`.
"""

from __future__ import annotations

AGENT = ("agent.created", "agent.updated", "agent.archived", "agent.deleted")
ENVIRONMENT = ("environment.created", "environment.updated", "environment.archived", "environment.deleted")
SESSION = (
    "session.created",
    "session.updated",
    "session.archived",
    "session.deleted",
    "session.requires_action",
    "session.budget_reached",
    "session.outcome_evaluation_ended",
    "session.pending",
    "session.running",
    "session.idled",
    "session.status_rescheduled",
    "session.status_run_started",
    "session.status_idled",
    "session.status_terminated",
)
THREAD = ("session.thread_created", "session.thread_idled", "session.thread_terminated")
MEMORY_STORE = ("memory_store.created", "memory_store.archived", "memory_store.deleted")
VAULT = ("vault.created", "vault.archived", "vault.deleted")
CREDENTIAL = (
    "vault_credential.created",
    "vault_credential.archived",
    "vault_credential.deleted",
    "vault_credential.refresh_failed",
)
DEPLOYMENT = (
    "deployment.created",
    "deployment.updated",
    "deployment.paused",
    "deployment.unpaused",
    "deployment.archived",
    "deployment.deleted",
)
DEPLOYMENT_RUN = ("deployment_run.started", "deployment_run.succeeded", "deployment_run.failed")

WORKSPACE_EVENT_TYPES: tuple[str, ...] = (
    AGENT + ENVIRONMENT + SESSION + THREAD + MEMORY_STORE + VAULT + CREDENTIAL + DEPLOYMENT + DEPLOYMENT_RUN
)
ORGANIZATION_EVENT_TYPES: tuple[str, ...] = (
    "external_key.failed",
    "external_key.recovered",
    "user_profile.enforcement_action_opened",
    "user_profile.enforcement_action_resolved",
    "user_profile.program_status_updated",
)
# The extra field of the data each type family carries beside `id`, `type`, `workspace_id`, `organization_id`.
EXTRA_FIELDS = {**dict.fromkeys(THREAD, "session_thread_id"), **dict.fromkeys(CREDENTIAL, "vault_id")}
