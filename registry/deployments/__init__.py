"""Deployments: a named agent (pinned to one version), an environment, initial events, resources, vaults and
an optional budget, fired on a cron schedule or by `run`; each fire is a deployment run that records the
session it created or the typed error that prevented it. `/v1/deployments` and `/v1/deployment_runs`, in the
shapes of the reference client's `client.beta.deployments` and `client.beta.deployment_runs`.

Status. `active` or `paused`; `paused_reason` is set exactly while paused: `{"type": "manual"}` after `pause`,
or `{"type": "error", "error": {"type": <run error type>}}` after a fire found what it needs gone. `archive`
is final (no fire, no update, pause, unpause or run: 409) and an archived deployment reports `active` with
`archived_at`; its schedule lists no upcoming run but keeps `last_run_at`. `unpause` clears the reason and
reschedules from now: ticks missed while paused are not fired. `pause` on a paused deployment and `unpause`
on an active one change nothing. An update never unpauses; a change of `schedule` moves the next tick to the
first after now (null schedule: manual only).

Fires. The scheduler of triggers (`runtriggers`, `registry.triggers.scheduler.run_once`) fires due
deployments in the same pass. A scheduled run's row is its claim: the unique (deployment, `scheduled_at`)
pair makes a second fire of a tick impossible however many schedulers run, and a deployment that missed
several ticks (no scheduler running) fires once for the whole window, then at the first tick after now.
`run` fires at once, outside the schedule, also while paused (it stays paused); `trigger_context` says which
(`schedule` with its `scheduled_at`, or `manual`). A run records the session's creation only: its
`session_id` or its `error`, never what the session does afterwards. `schedule.last_run_at` is the last
scheduled run's start; manual runs leave it. Webhook events: `deployment_run.started`, then
`deployment_run.succeeded` or `deployment_run.failed`, in the fire's transaction; `deployment.created`,
`updated`, `paused` (by hand, by a fire, or by an archive), `unpaused`, `archived` in their change's.

Run errors and pause reasons (`errors.py`). Before creating the session a fire checks, in this order, and
records the first failure as the run's error, pausing the deployment with the same type:
  agent_archived_error                 the pinned agent is archived
  skill_not_found_error                a custom skill of the agent's pinned definition (or its version) is gone
  environment_not_found_error          the environment was deleted
  environment_archived_error           the environment is archived
  vault_not_found_error / vault_archived_error          a vault of `vault_ids` is deleted / archived
  self_hosted_resources_unsupported_error   the environment is self-hosted and a `file` or `github_repository`
                                       resource is configured (its worker mounts memory stores only)
  file_not_found_error                 a `file` resource, or a file an initial event names (a file rubric, an
                                       image or document source), is deleted or expired
  session_resource_not_found_error     a memory store resource was deleted
  memory_store_archived_error          a memory store resource is archived
  mcp_egress_blocked_error             an MCP server URL of the agent resolves to an address the runtime may not
                                       reach (`registry.core.egress`; not checked when MCP goes through the gateway)
  unknown_error                        anything unexpected while creating the session
Two errors do not pause: `session_rate_limited_error` (a rate limit refused the session) and
`session_creation_rejected_error` (the session create refused what no check above foresaw, for example a
budget whose model lost its list price); the schedule goes on. `workspace_archived_error` and
`organization_disabled_error` have no cause in this registry. Archiving an agent or environment through its
service pauses its live deployments at once (`deployments_pause_for_archive`), without waiting for a fire.
Create and update make the same checks on the fields they change (with the values those meet) plus the
session create's own (the agent usable, its version existing, checkouts, mount paths, a budget's list price)
and answer a failure with a 400 naming the field and the reason; nothing is written. The MCP egress check
is a fire's only: it resolves names, and the deployment's body names no URL.

Deployments or triggers. Both start sessions on a cron schedule from the same scheduler. Use a deployment
for the reference client's API: several typed initial events (messages, outcomes), resources, a budget, a
pinned agent version, an append-only run history with typed errors, and a deployment that pauses itself when
what it needs is gone. Use a trigger (`/v1/triggers`, interface.md's portable contract) for a text payload
per fire, a title template and `stop`/`restart` of the sessions it started; a failing trigger keeps firing
with `status: error`.
"""
